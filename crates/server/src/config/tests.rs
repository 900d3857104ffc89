//! The loading tests: layers in order, unknown keys and bad values refused
//! by name, lists from flags and the environment, and the sample file equal
//! to the defaults.

use super::*;

fn load_text(text: &str, env: &[(&str, &str)], sets: &[(&str, &str)]) -> Result<Config, ConfigError> {
    // A directory per call: tests run in parallel, and two texts of one
    // length once shared a file (a flaky race).
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tutti-config-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("tutti.toml");
    std::fs::write(&path, text).expect("write");
    let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    let sets: Vec<(String, String)> = sets.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let r = Config::load(Some(&path), env, &sets);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

#[test]
fn the_sample_config_is_the_defaults() {
    let sample = include_str!("../../../../deploy/tutti.toml");
    assert_eq!(load_text(sample, &[], &[]).expect("the sample loads"), Config::default());
}

#[test]
fn room_spatial_takes_a_switch_or_a_mode() {
    use crate::room::SpatialMode;
    for (text, want) in [
        ("[room]\nspatial = true\n", SpatialMode::Panned),
        ("[room]\nspatial = false\n", SpatialMode::Off),
        ("[room]\nspatial = \"binaural\"\n", SpatialMode::Binaural),
    ] {
        assert_eq!(load_text(text, &[], &[]).expect(text).room.spatial, want, "{text}");
    }
    let set = load_text("", &[], &[("room.spatial", "true")]).expect("--set room.spatial=true");
    assert_eq!(set.room.spatial, SpatialMode::Panned);
    assert!(load_text("[room]\nspatial = 3\n", &[], &[]).is_err(), "a number is neither");
}

#[test]
fn breakout_create_rooms_is_off_unless_set() {
    assert!(!Config::default().breakout.create_rooms);
    let on = load_text("[breakout]\ncreate_rooms = true\n", &[], &[]).expect("loads");
    assert!(on.breakout.create_rooms);
    let flag = load_text("", &[], &[("breakout.create_rooms", "true")]).expect("loads");
    assert!(flag.breakout.create_rooms);
    let bad = load_text("[breakout]\ncreate_rooms = \"yes\"\n", &[], &[]).expect_err("refused").to_string();
    assert!(bad.contains("create_rooms") || bad.contains("breakout"), "{bad}");
    let unknown = load_text("[breakout]\ncreate_room = true\n", &[], &[]).expect_err("refused").to_string();
    assert!(unknown.contains("create_room"), "{unknown}");
}

#[test]
fn lists_are_set_from_flags_and_the_environment() {
    let cfg = load_text(
        "[auth]\nsecret = \"0123456789abcdef0123456789abcdef\"\n",
        &[("TUTTI_RTP_OUT_ALLOWED", "127.0.0.0/8, 10.0.0.0/8")],
        &[("webhooks.urls", "[\"http://127.0.0.1:9100/\"]")],
    )
    .expect("loads");
    let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
    assert_eq!(cfg.rtp_out.allowed, ["127.0.0.0/8", "10.0.0.0/8"]);
    assert_eq!(cfg.webhooks.urls, ["http://127.0.0.1:9100/"]);
    assert!(err(load_text("", &[], &[("webhooks.urls", "[oops")])).contains("list"));
    assert!(err(load_text("", &[], &[("rtp_out.allowed", "10.0.0.0/99")])).contains("rtp_out.allowed"));
    assert!(err(load_text("", &[], &[("webhooks.urls", "http://127.0.0.1:9/")])).contains("auth.secret"));
    assert!(err(load_text("[recording]\nmax_bytes = 10\n", &[], &[])).contains("recording"));
    // sound: voice processing keys.
    assert!(err(load_text("[room]\nnoise_suppression = \"loud\"\n", &[], &[])).contains("room.noise_suppression"));
    assert!(err(load_text("", &[], &[("room.loudness_target_dbfs", "3")])).contains("room.loudness_target_dbfs"));
    let cfg =
        load_text("[room]\nnoise_suppression = \"on\"\n", &[("TUTTI_ROOM_LOUDNESS", "true")], &[]).expect("loads");
    assert_eq!((cfg.room.noise_suppression.as_str(), cfg.room.loudness), ("on", true));
}

#[test]
fn layers_apply_in_order_file_env_flags() {
    let cfg = load_text(
        "http = \"127.0.0.1:9000\"\nmix_threads = 3\n[room]\nmax_speakers = 4\n",
        &[("TUTTI_MIX_THREADS", "2"), ("TUTTI_ROOM_MAX_PARTICIPANTS", "50"), ("HOME", "/root")],
        &[("mix_threads", "1")],
    )
    .expect("loads");
    assert_eq!(cfg.http, SocketAddr::from(([127, 0, 0, 1], 9000)));
    assert_eq!(cfg.room.max_speakers, 4);
    assert_eq!(cfg.room.max_participants, 50, "environment over the file");
    assert_eq!(cfg.mix_threads, 1, "flags over the environment");
}

#[test]
fn unknown_keys_and_bad_values_are_refused_by_name() {
    let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
    assert!(err(load_text("colour = \"red\"\n", &[], &[])).contains("unknown key 'colour'"));
    assert!(err(load_text("[room]\nmax_speakerz = 3\n", &[], &[])).contains("unknown key 'room.max_speakerz'"));
    assert!(err(load_text("", &[("TUTTI_MIX_THREADS", "many")], &[])).contains("TUTTI_MIX_THREADS"));
    assert!(err(load_text("", &[], &[("room.nope", "1")])).contains("unknown key 'room.nope'"));
    assert!(err(load_text("mix_threads = \"two\"\n", &[], &[])).contains("tutti.toml"));
    assert!(err(load_text("[room]\nmax_speakers = 0\n", &[], &[])).contains("room.max_speakers"));
    assert!(err(load_text("[room]\nspeaker_complexity = 11\n", &[], &[])).contains("room.speaker_complexity"));
    assert!(err(load_text("[room]\ncomplexity = 11\n", &[], &[])).contains("room.complexity"));
    assert!(err(load_text("advertise = \"somewhere\"\n", &[], &[])).contains("advertise"));
    assert!(err(load_text("room = 3\n", &[], &[])).contains("section"));
    assert_eq!(Config::unknown_env([("TUTTI_HTTPS".to_owned(), String::new())]), ["TUTTI_HTTPS"]);
}

#[test]
fn ice_servers_load_from_the_file_and_are_checked() {
    let text = "[[ice_servers]]\nurls = [\"turn:127.0.0.1:3478?transport=tcp\"]\nsecret = \"s3cret\"\n\
                ttl_seconds = 600\n\n[[ice_servers]]\nurls = [\"stun:127.0.0.1:3478\"]\n";
    let cfg = load_text(text, &[], &[]).expect("loads");
    assert_eq!(cfg.ice_servers.len(), 2);
    assert_eq!(cfg.ice_servers[0].secret, "s3cret");
    assert_eq!(cfg.ice_servers[0].ttl_seconds, 600);
    assert_eq!(cfg.ice_servers[1].ttl_seconds, 86_400, "the default TTL");
    let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
    let open_turn = "[[ice_servers]]\nurls = [\"turn:127.0.0.1:3478\"]\n";
    let e = err(load_text(open_turn, &[], &[]));
    assert!(e.contains("ice_servers") && e.contains("entry 0") && e.contains("credentials"), "{e}");
    assert!(err(load_text("[[ice_servers]]\nurl = \"stun:x\"\n", &[], &[])).contains("url"));
    assert!(!format!("{cfg:?}").contains("s3cret"), "Debug hides the secret");
}

#[test]
fn auth_keys_load_from_the_file_and_the_environment_and_are_checked() {
    let file = "[auth]\nsecret = \"0123456789abcdef0123456789abcdef\"\n\
                keys = [{ id = \"2026-12\", secret = \"the december key, thirty-two bytes long\" }]\n";
    let cfg = load_text(file, &[], &[]).expect("loads");
    assert_eq!(cfg.auth.key_pairs(), [("2026-12".to_owned(), "the december key, thirty-two bytes long".to_owned())]);
    assert!(!format!("{cfg:?}").contains("december key"), "Debug hides key secrets");
    let env = [("TUTTI_AUTH_KEYS", "[{ id = \"a\", secret = \"0123456789abcdef0123456789abcdef\" }]")];
    assert_eq!(load_text("", &env, &[]).expect("loads").auth.keys.len(), 1);
    let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
    let short = "[auth]\nkeys = [{ id = \"a\", secret = \"short\" }]\n";
    assert!(err(load_text(short, &[], &[])).contains("auth.keys"));
    let twice = "[auth]\nkeys = [{ id = \"a\", secret = \"0123456789abcdef0123456789abcdef\" }, \
                 { id = \"a\", secret = \"0123456789abcdef0123456789abcdef\" }]\n";
    assert!(err(load_text(twice, &[], &[])).contains("unique"));
    assert!(err(load_text("[webhooks]\nsecret = \"short\"\n", &[], &[])).contains("webhooks.secret"));
    assert!(err(load_text("[room]\nempty_timeout_seconds = -1\n", &[], &[])).contains("room.empty_timeout_seconds"));
}

#[test]
fn cluster_mode_needs_a_shared_secret_and_addresses() {
    let redis = [("TUTTI_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379/0")];
    let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
    assert!(err(load_text("", &redis, &[])).contains("api_url"));
    let addrs = "[cluster]\napi_url = \"http://127.0.0.2:8080\"\nmedia_addr = \"127.0.0.2:4000\"\n";
    assert!(err(load_text(addrs, &redis, &[])).contains("auth.secret"));
    let secret = [("auth.secret", "0123456789abcdef0123456789abcdef")];
    let cfg = load_text(addrs, &redis, &secret).expect("a complete cluster config loads");
    assert!(cfg.cluster.enabled());
    // One secret per purpose: the cluster's own is long enough; webhooks in
    // cluster mode are signed with their own, never with auth.secret.
    let short = [("TUTTI_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379/0"), ("TUTTI_CLUSTER_SECRET", "short")];
    assert!(err(load_text(addrs, &short, &secret)).contains("secret"));
    let hooks = format!("{addrs}[webhooks]\nurls = [\"http://127.0.0.1:9/hook\"]\n");
    assert!(err(load_text(&hooks, &redis, &secret)).contains("webhooks.secret"));
    let own =
        [("auth.secret", "0123456789abcdef0123456789abcdef"), ("webhooks.secret", "fedcba9876543210fedcba9876543210")];
    load_text(&hooks, &redis, &own).expect("webhooks with their own secret load");
    assert_eq!(cfg.cluster.redis_url, "redis://127.0.0.1:6379/0", "the environment variable comes from the key path");
    assert!(!Config::default().cluster.enabled(), "off by default");
    // Rooms across nodes: when_full unless told, a mesh address that must parse.
    assert_eq!(cfg.cluster.room_spread, tutti_cluster::RoomSpread::WhenFull);
    let always = [("TUTTI_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379/0"), ("TUTTI_CLUSTER_ROOM_SPREAD", "always")];
    let cfg = load_text(addrs, &always, &secret).expect("room_spread from the environment");
    assert_eq!(cfg.cluster.room_spread, tutti_cluster::RoomSpread::Always);
    let sometimes =
        [("TUTTI_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379/0"), ("TUTTI_CLUSTER_ROOM_SPREAD", "sometimes")];
    assert!(err(load_text(addrs, &sometimes, &secret)).contains("sometimes"));
    let mesh = [("cluster.mesh_addr", "not an address"), secret[0]];
    assert!(err(load_text(addrs, &redis, &mesh)).contains("mesh_addr"));
    let mesh = [("cluster.mesh_addr", "127.0.0.2:0"), secret[0]];
    assert_eq!(load_text(addrs, &redis, &mesh).expect("a mesh address").cluster.mesh_addr, "127.0.0.2:0");
}

#[test]
fn the_sip_edge_is_off_and_set_from_the_environment() {
    let d = Config::default().sip;
    assert!(!d.enabled && d.trusted.is_empty() && d.room_prefix.is_empty());
    assert_eq!(d.listen.to_string(), "0.0.0.0:5060");
    let cfg = load_text(
        "",
        &[
            ("TUTTI_SIP_ENABLED", "true"),
            ("TUTTI_SIP_TRUSTED", "10.0.0.0/8,127.0.0.0/8"),
            ("TUTTI_SIP_ROOM_PREFIX", "tel-"),
        ],
        &[("sip.listen", "127.0.0.1:5070")],
    )
    .expect("loads");
    assert!(cfg.sip.enabled);
    assert_eq!(cfg.sip.trusted, ["10.0.0.0/8", "127.0.0.0/8"]);
    assert_eq!(cfg.sip.room_prefix, "tel-");
    assert_eq!(cfg.sip.listen.to_string(), "127.0.0.1:5070");
    let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
    assert!(err(load_text("", &[("TUTTI_SIP_TRUSTED", "10.0.0.0/99")], &[])).contains("sip.trusted"));
    assert!(err(load_text("[sip]\npublic_address = \"a b\"\n", &[], &[])).contains("sip.public_address"));
    // The Contact: public_address, else the listen IP, else the fallback (the advertised media IP).
    let fallback = "192.0.2.1".parse().expect("ip");
    assert_eq!(d.contact(fallback, "0.0.0.0:5060".parse().expect("addr")), "192.0.2.1:5060");
    assert_eq!(d.contact(fallback, "127.0.0.1:5062".parse().expect("addr")), "127.0.0.1:5062");
    let public = SipConfig { public_address: "sip.example.com:5060".into(), ..SipConfig::default() };
    assert_eq!(public.contact(fallback, "0.0.0.0:5060".parse().expect("addr")), "sip.example.com:5060");
    // The keypad map: the default, a list from the environment, and bad entries named.
    use super::sip::KeyAction;
    assert_eq!(d.keypad_map().expect("valid"), [("*6".into(), KeyAction::Mute), ("*7".into(), KeyAction::Hand)]);
    let keys = load_text("", &[("TUTTI_SIP_KEYPAD", "#1=hand,*#9=mute")], &[]).expect("loads").sip;
    assert_eq!(keys.keypad_map().expect("valid"), [("#1".into(), KeyAction::Hand), ("*#9".into(), KeyAction::Mute)]);
    for bad in ["*6", "*6=dance", "x=mute", "=mute", "*123456789=mute"] {
        assert!(err(load_text("", &[("TUTTI_SIP_KEYPAD", bad)], &[])).contains("sip.keypad"), "{bad}");
    }
    assert!(err(load_text("[sip]\nkeypad = [\"*6=mute\", \"*=hand\"]\n", &[], &[])).contains("overlap"));
}

#[test]
fn sip_pins_load_and_bad_ones_are_named_without_the_pin() {
    let sip = load_text("", &[("TUTTI_SIP_PIN", "true"), ("TUTTI_SIP_PINS", "4711=standup, 0815 = board")], &[])
        .expect("loads")
        .sip;
    assert!(sip.pin);
    assert_eq!(sip.pin_map().expect("valid"), [("4711".into(), "standup".into()), ("0815".into(), "board".into())]);
    let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
    for bad in ["4711", "47a1=standup", "=standup", "12345678901234567=standup", "4711=bad room", "1=a,1=b"] {
        let e = err(load_text("", &[("TUTTI_SIP_PINS", bad)], &[]));
        assert!(e.contains("sip.pins"), "{bad}: {e}");
        assert!(!e.contains("47a1") && !e.contains("1234567890"), "a PIN is never repeated: {e}");
    }
    assert!(err(load_text("[sip]\npin = true\n", &[], &[])).contains("no PIN is set"));
    let trunk = "[sip]\npins = [\"1=a\"]\n[[sip.trunks]]\nname = \"t\"\nnetworks = [\"10.0.0.0/8\"]\n";
    assert!(load_text(&format!("{trunk}pin = true\n"), &[], &[]).expect("loads").sip.trunks[0].pin == Some(true));
    assert!(err(load_text(&format!("{trunk}pin = true\nroom = \"x\"\n"), &[], &[])).contains("not both"));
    assert!(err(load_text("[sip]\npin_attempts = 0\n", &[], &[])).contains("sip.pin_attempts"));
    assert!(
        err(load_text("[sip]\npin_digit_timeout_seconds = 0\n", &[], &[])).contains("sip.pin_digit_timeout_seconds")
    );
}

#[test]
fn sip_trunks_load_from_the_file_and_bad_ones_are_named() {
    let text = "[sip]\nrealm = \"example\"\n\n[[sip.trunks]]\nname = \"carrier\"\nnetworks = [\"192.0.2.0/24\"]\n\
                username = \"acme\"\npassword = \"s3cret\"\nnumbers = [\"4711\"]\nroom_prefix = \"\"\n\n\
                [[sip.trunks]]\nname = \"pbx\"\nnetworks = [\"10.0.0.0/8\"]\nroom = \"lobby\"\n";
    let sip = load_text(text, &[], &[]).expect("loads").sip;
    assert_eq!(sip.realm, "example");
    assert_eq!(sip.trunks.len(), 2);
    assert!(sip.trunks[0].authenticates() && !sip.trunks[1].authenticates());
    assert_eq!(sip.trunks[0].room_prefix.as_deref(), Some(""), "an empty prefix is kept apart from none");
    assert_eq!((sip.trunks[1].room.as_str(), sip.trunks[1].room_prefix.as_deref()), ("lobby", None));
    let err = |r: Result<Config, ConfigError>| r.expect_err("refused").to_string();
    let bad = [
        ("name = \"\"\nnetworks = [\"10.0.0.0/8\"]", "name"),
        ("name = \"t\"", "networks"),
        ("name = \"t\"\nnetworks = [\"10.0.0.0/99\"]", "trunk 't'"),
        ("name = \"t\"\nnetworks = [\"10.0.0.0/8\"]\nusername = \"u\"", "both"),
        ("name = \"t\"\nnetworks = [\"10.0.0.0/8\"]\nroom = \"a b\"", "room"),
        ("name = \"t\"\nnetworks = [\"10.0.0.0/8\"]\nnumbers = [\"\"]", "number"),
    ];
    for (trunk, named) in bad {
        let message = err(load_text(&format!("[[sip.trunks]]\n{trunk}\n"), &[], &[]));
        assert!(message.contains("sip.trunks") && message.contains(named), "{trunk}: {message}");
    }
    let unknown =
        err(load_text("[[sip.trunks]]\nname = \"t\"\nnetworks = [\"10.0.0.0/8\"]\nrealm = \"x\"\n", &[], &[]));
    assert!(unknown.contains("realm"), "a trunk has no realm of its own: {unknown}");
    let twice = "[[sip.trunks]]\nname = \"t\"\nnetworks = [\"10.0.0.0/8\"]\n".repeat(2);
    assert!(err(load_text(&twice, &[], &[])).contains("two trunks"));
    assert!(err(load_text("[sip]\nrealm = \"\"\n", &[], &[])).contains("sip.realm"));
}

#[test]
fn a_loopback_origin_may_take_any_port_and_no_other_host_may() {
    use super::{CorsConfig, origin_matches};
    let cors = |o: &[&str]| CorsConfig { allowed_origins: o.iter().map(|s| (*s).to_owned()).collect() }.check();
    assert!(cors(&["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*", "https://app.example"]).is_ok());
    assert!(cors(&["https://app.example:*"]).is_err_and(|e| e.contains("loopback only")));
    assert!(origin_matches("http://localhost:*", "http://localhost:5173"));
    assert!(!origin_matches("http://localhost:*", "http://localhost:5173.evil.example"));
    assert!(!origin_matches("http://localhost:*", "http://localhost:"));
    assert!(!origin_matches("http://localhost:*", "https://localhost:443"), "the scheme counts");
    assert!(
        origin_matches("https://app.example", "https://app.example")
            && !origin_matches("https://app.example", "https://app.example:8443")
    );
}

#[test]
fn sip_srtp_is_allowed_by_default_and_set_for_all_or_per_trunk() {
    use super::SrtpMode;
    assert_eq!(Config::default().sip.srtp, SrtpMode::Allow);
    let text = "[[sip.trunks]]\nname = \"t\"\nnetworks = [\"10.0.0.0/8\"]\nsrtp = \"require\"\n\n\
                [[sip.trunks]]\nname = \"u\"\nnetworks = [\"10.0.0.0/8\"]\n";
    let sip = load_text(text, &[("TUTTI_SIP_SRTP", "off")], &[]).expect("loads").sip;
    assert_eq!((sip.srtp, sip.trunks[0].srtp, sip.trunks[1].srtp), (SrtpMode::Off, Some(SrtpMode::Require), None));
    let err = load_text("[sip]\nsrtp = \"maybe\"\n", &[], &[]).expect_err("refused").to_string();
    assert!(err.contains("maybe") && err.contains("require"), "the modes are named: {err}");
}
