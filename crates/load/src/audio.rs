//! What the simulated participants send, encoded once at start: a speech
//! clip (a WAV file, or a synthesized speech-like signal), Opus silence, and
//! each probe's marker burst. Every frame carries its RFC 6464 level.

use std::path::Path;

use bytes::Bytes;
use tutti_mix::{FRAME_SAMPLES, level_of};

use crate::LoadError;
use crate::marker::{MARKER_FRAMES, marker_pcm};
use crate::talk::Rng;

/// One encoded 20 ms frame and its RFC 6464 level (0 loudest, 127 silence).
#[derive(Debug, Clone)]
pub struct Frame {
    /// Opus payload.
    pub payload: Bytes,
    /// RFC 6464 level of the PCM it was encoded from.
    pub level: u8,
}

/// Everything the generator sends, encoded once and shared by all clients.
#[derive(Debug, Clone)]
pub struct Material {
    /// The speech clip, looped by talkers (each from its own offset).
    pub speech: Vec<Frame>,
    /// One Opus frame of digital silence (level 127).
    pub silence: Frame,
    /// Per probe, its marker burst (then two frames of silence).
    pub markers: Vec<Vec<Frame>>,
}

fn opus_err(e: opus::Error) -> LoadError {
    LoadError::Audio(format!("Opus: {e}"))
}

fn encoder() -> Result<opus::Encoder, LoadError> {
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).map_err(opus_err)?;
    enc.set_bitrate(opus::Bitrate::Bits(32_000)).map_err(opus_err)?;
    Ok(enc)
}

/// Encodes `pcm` (whole frames; a partial tail is dropped) with one encoder.
fn encode(enc: &mut opus::Encoder, pcm: &[f32]) -> Result<Vec<Frame>, LoadError> {
    pcm.chunks_exact(FRAME_SAMPLES)
        .map(|f| {
            let payload = Bytes::from(enc.encode_vec_float(f, 1500).map_err(opus_err)?);
            Ok(Frame { payload, level: level_of(f) })
        })
        .collect()
}

impl Material {
    /// Encodes `speech` (48 kHz mono) and the markers of `probes` probes.
    pub fn new(speech: &[f32], probes: usize) -> Result<Self, LoadError> {
        if speech.len() < FRAME_SAMPLES {
            return Err(LoadError::Audio("the speech clip is shorter than one frame".into()));
        }
        let speech = encode(&mut encoder()?, speech)?;
        let zeros = [0.0f32; FRAME_SAMPLES];
        let silence = encode(&mut encoder()?, &zeros)?.remove(0);
        let silence = Frame { level: 127, ..silence };
        let markers = (0..probes)
            .map(|p| {
                // One frame of silence primes the encoder; the burst's onset
                // is then the first sample of the first frame sent.
                let mut pcm = vec![0.0f32; FRAME_SAMPLES];
                pcm.extend(marker_pcm(p));
                pcm.extend(std::iter::repeat_n(0.0, 2 * FRAME_SAMPLES));
                let mut frames = encode(&mut encoder()?, &pcm)?;
                frames.remove(0);
                for f in frames.iter_mut().skip(MARKER_FRAMES) {
                    f.level = 127;
                }
                Ok(frames)
            })
            .collect::<Result<_, LoadError>>()?;
        Ok(Self { speech, silence, markers })
    }
}

/// Reads a 48 kHz mono WAV file (16-bit integer or 32-bit float) as samples.
pub fn read_wav(path: &Path) -> Result<Vec<f32>, LoadError> {
    let bad = |e: hound::Error| LoadError::Audio(format!("{}: {e}", path.display()));
    let mut r = hound::WavReader::open(path).map_err(bad)?;
    let spec = r.spec();
    if spec.sample_rate != 48_000 || spec.channels != 1 {
        return Err(LoadError::Audio(format!(
            "{}: need 48 kHz mono, got {} Hz, {} channels",
            path.display(),
            spec.sample_rate,
            spec.channels
        )));
    }
    match spec.sample_format {
        hound::SampleFormat::Float => r.samples::<f32>().collect::<Result<_, _>>().map_err(bad),
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1u32 << (spec.bits_per_sample.clamp(1, 32) - 1)) as f32;
            r.samples::<i32>().map(|s| s.map(|v| v as f32 * scale)).collect::<Result<_, _>>().map_err(bad)
        }
    }
}

/// Bandwidth of the speech-like signal: nothing at or above it, so the
/// probe markers (2 kHz and up) stand alone in their band.
pub const SPEECH_BAND_HZ: f32 = 1_600.0;

/// A speech-like signal, 48 kHz mono: syllables of 120–320 ms with a
/// gliding pitch (90–220 Hz), two formants that move per syllable, a
/// raised-cosine envelope, and pauses between words. Its harmonics stop
/// below [`SPEECH_BAND_HZ`]; its level while voiced is about −20 dBov.
pub fn speech_like(seconds: f64, seed: u64) -> Vec<f32> {
    let rate = 48_000.0f64;
    let total = (seconds * rate) as usize;
    let mut out = Vec::with_capacity(total);
    let mut rng = Rng::new(seed);
    let mut phase = [0.0f64; 32];
    while out.len() < total {
        // A word: 1–4 syllables, then a pause.
        let syllables = 1 + rng.below(4);
        for _ in 0..syllables {
            let len = ((0.12 + 0.2 * rng.unit()) * rate) as usize;
            let f0_start = 90.0 + 130.0 * rng.unit();
            let f0_end = f0_start * (0.8 + 0.4 * rng.unit());
            let f1 = 300.0 + 500.0 * rng.unit();
            let f2 = 900.0 + 500.0 * rng.unit();
            let amp = 0.12 + 0.08 * rng.unit();
            for i in 0..len {
                let x = i as f64 / len as f64;
                let f0 = f0_start + (f0_end - f0_start) * x;
                let env = (std::f64::consts::PI * x).sin().powi(2);
                let mut s = 0.0;
                for (k, ph) in phase.iter_mut().enumerate() {
                    let fk = f0 * (k + 1) as f64;
                    if fk >= f64::from(SPEECH_BAND_HZ) {
                        break;
                    }
                    let formant = 1.0 / (1.0 + ((fk - f1) / 120.0).powi(2)) + 0.6 / (1.0 + ((fk - f2) / 150.0).powi(2));
                    *ph = (*ph + std::f64::consts::TAU * fk / rate) % std::f64::consts::TAU;
                    s += formant / (k + 1) as f64 * ph.sin();
                }
                out.push((amp * env * s) as f32);
            }
        }
        let pause = ((0.05 + 0.25 * rng.unit()) * rate) as usize;
        out.extend(std::iter::repeat_n(0.0f32, pause));
    }
    out.truncate(total);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tutti_mix::goertzel;

    #[test]
    fn speech_like_is_speech_loud_and_band_limited() {
        let s = speech_like(4.0, 1);
        assert_eq!(s.len(), 192_000);
        assert!(s.iter().all(|x| x.abs() < 1.0));
        let levels: Vec<u8> = s.chunks_exact(FRAME_SAMPLES).map(level_of).collect();
        let voiced = levels.iter().filter(|&&l| l < 40).count();
        assert!(voiced > levels.len() / 2, "{voiced} of {} frames voiced", levels.len());
        let loudest = levels.iter().copied().min().unwrap_or(127);
        assert!((10..=30).contains(&loudest), "loudest frame at level {loudest}");
        for f in s.chunks_exact(FRAME_SAMPLES) {
            for p in 0..4 {
                assert!(goertzel(f, crate::marker::marker_freq(p)) < 0.01);
            }
        }
    }

    #[test]
    fn material_is_encoded_with_levels() -> Result<(), LoadError> {
        let m = Material::new(&speech_like(1.0, 2), 2)?;
        assert_eq!(m.speech.len(), 50);
        assert_eq!(m.silence.level, 127);
        assert_eq!(m.markers.len(), 2);
        assert_eq!(m.markers[1].len(), MARKER_FRAMES + 2);
        assert!(m.markers[1][0].level <= 5, "{}", m.markers[1][0].level);
        assert_eq!(m.markers[1][MARKER_FRAMES].level, 127);
        Ok(())
    }
}
