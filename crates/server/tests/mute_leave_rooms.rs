//! Over real WebRTC: muting a participant takes their tone out of the
//! others' mixes, leaving takes them out of the room (their peer is
//! closed), and a participant in room A never hears room B.

mod common;

use std::time::{Duration, Instant};

use common::{create_room, http, room, start};
use tutti_client::{JoinAs, ToneClient, run_for, run_until};

/// Well above a mixed tone's residue, well below a present one (≈0.2 amplitude).
const HEARD: f32 = 0.05;

#[test]
fn mute_leave_and_room_isolation() {
    let (rt, server) = start();
    let api = server.http_addr();
    create_room(api, "a");
    create_room(api, "b");
    let join = |room: &str, f: f32| ToneClient::join(api, room, f, JoinAs::Whip).expect("join");
    let (mut a1, mut a2, mut a3) = (join("a", 440.0), join("a", 660.0), join("a", 880.0));
    let (mut b1, mut b2) = (join("b", 1000.0), join("b", 1250.0));

    {
        let mut all = [&mut a1, &mut a2, &mut a3, &mut b1, &mut b2];
        let up =
            run_until(&mut all, Instant::now() + Duration::from_secs(20), |cs| cs.iter().all(|c| c.heard.len() >= 25));
        assert!(up, "everyone connected and hears the mix");
        let t0 = Instant::now();
        run_for(&mut all, Duration::from_secs(2));
        // Rooms are isolated; within a room everyone hears the others.
        for (c, hears, not) in [
            (&*all[0], [660.0, 880.0], [1000.0, 1250.0]),
            (&*all[1], [440.0, 880.0], [1000.0, 1250.0]),
            (&*all[3], [1250.0, 1250.0], [440.0, 660.0]),
            (&*all[4], [1000.0, 1000.0], [440.0, 880.0]),
        ] {
            for f in hears {
                assert!(c.hears(f, t0) > HEARD, "{} Hz hears {f} Hz: {}", c.freq, c.hears(f, t0));
            }
            for f in not {
                assert!(c.hears(f, t0) < 0.01, "{} Hz must not hear {f} Hz: {}", c.freq, c.hears(f, t0));
            }
            assert!(c.hears(c.freq, t0) < 0.01, "{} Hz hears itself", c.freq);
        }
    }

    // Mute 660 Hz: after the selection notices (a tick), nobody hears it.
    let r = http(api, "PATCH", &a2.location, Some("application/json"), br#"{"muted":true}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let muted: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(muted["muted"], true);
    {
        let mut all = [&mut a1, &mut a2, &mut a3, &mut b1, &mut b2];
        run_for(&mut all, Duration::from_millis(300));
        let t1 = Instant::now();
        run_for(&mut all, Duration::from_millis(1500));
        assert!(all[0].hears(660.0, t1) < 0.01, "muted 660 Hz still heard: {}", all[0].hears(660.0, t1));
        assert!(all[2].hears(660.0, t1) < 0.01, "muted 660 Hz still heard by 880 Hz");
        assert!(all[0].hears(880.0, t1) > HEARD, "880 Hz still heard by 440 Hz");
        assert!(all[1].hears(440.0, t1) > HEARD, "the muted participant still hears the room");
    }
    assert_eq!(
        room(api, "a")["participants"].as_array().map(|p| p.iter().filter(|p| p["muted"] == true).count()),
        Some(1)
    );

    // 880 Hz leaves: its peer is closed (DTLS close_notify) and its tone is gone.
    assert_eq!(http(api, "DELETE", &a3.location, None, b"").status, 204);
    {
        let mut all = [&mut a1, &mut a2, &mut a3, &mut b1, &mut b2];
        let closed = run_until(&mut all, Instant::now() + Duration::from_secs(5), |cs| cs[2].closed);
        assert!(closed, "the leaver's peer was closed by the server");
        let t2 = Instant::now();
        run_for(&mut all, Duration::from_millis(1500));
        assert!(all[0].hears(880.0, t2) < 0.01, "880 Hz heard after leaving");
        assert!(all[3].hears(1250.0, t2) > HEARD, "room B carries on");
    }
    let ids: Vec<u64> =
        room(api, "a")["participants"].as_array().expect("list").iter().filter_map(|p| p["id"].as_u64()).collect();
    assert_eq!(ids.len(), 2);
    assert!(!ids.contains(&a3.id), "the leaver is no longer listed");

    // Deleting room B closes its peers.
    assert_eq!(http(api, "DELETE", "/v1/rooms/b", None, b"").status, 204);
    let mut bs = [&mut b1, &mut b2];
    assert!(run_until(&mut bs, Instant::now() + Duration::from_secs(5), |cs| cs.iter().all(|c| c.closed)));
    assert_eq!(http(api, "GET", "/v1/rooms/b", None, b"").status, 404);
    assert_eq!(server.participants(), 2);
    rt.block_on(server.shutdown());
}
