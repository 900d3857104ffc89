//! A participant becomes a speaker at their talkspurt's onset and is decoded
//! from a fresh decoder state (tutti does not decode non-selected
//! candidates). This measures what that costs against a decoder that had
//! decoded every frame all along, and bounds it.

use tutti_mix::{Decoder, EncoderConfig, FRAME_SAMPLES, Pcm, tone};

/// SNR in dB of `test` against `reference`.
fn snr_db(reference: &[f32], test: &[f32]) -> f64 {
    let signal: f64 = reference.iter().map(|&x| f64::from(x).powi(2)).sum();
    let noise: f64 = reference.iter().zip(test).map(|(&r, &t)| f64::from(r - t).powi(2)).sum();
    10.0 * (signal / noise.max(1e-12)).log10()
}

#[test]
fn a_fresh_decoder_at_the_onset_matches_continuous_decoding() {
    // A client's stream: 1 s of near-silence (low noise), then a voiced talkspurt.
    let mut client = tutti_mix::Encoder::new(&EncoderConfig::default()).expect("encoder");
    let mut packets = Vec::new();
    let mut seed = 1u32;
    for _ in 0..50 {
        let mut pcm: Pcm = [0.0; FRAME_SAMPLES];
        for x in pcm.iter_mut() {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            *x = ((seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.002; // about −60 dBov
        }
        packets.push(client.encode(&pcm));
    }
    let onset = packets.len();
    for n in 0..25u64 {
        let start = n * FRAME_SAMPLES as u64;
        let (a, b) = (tone(220.0, 0.25, start), tone(660.0, 0.1, start));
        let pcm: Pcm = std::array::from_fn(|i| a[i] + b[i]);
        packets.push(client.encode(&pcm));
    }

    let mut continuous = Decoder::new().expect("decoder");
    let mut reference = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let mut pcm = [0.0; FRAME_SAMPLES];
        continuous.decode(p, &mut pcm).expect("decodes");
        if i >= onset {
            reference.push(pcm);
        }
    }
    let mut fresh = Decoder::new().expect("decoder");
    let mut selected = Vec::new();
    for p in &packets[onset..] {
        let mut pcm = [0.0; FRAME_SAMPLES];
        fresh.decode(p, &mut pcm).expect("decodes");
        selected.push(pcm);
    }

    let per_frame: Vec<f64> = reference.iter().zip(&selected).map(|(r, s)| snr_db(r, s)).collect();
    println!("onset SNR of a fresh decoder vs continuous, per frame (dB): {per_frame:.1?}");
    let first = per_frame[0];
    let settled = per_frame[3..].iter().copied().fold(f64::INFINITY, f64::min);
    // Measured: ~47 dB on the first frame (only the history of the preceding
    // near-silence is missing), 52-62 dB after: inaudible, so decoding
    // candidates ahead of their selection would buy nothing.
    assert!(first > 35.0, "first onset frame SNR {first:.1} dB");
    assert!(settled > 45.0, "after the onset SNR {settled:.1} dB");
}
