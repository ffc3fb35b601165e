//! The `[shoal_auth]` envelope: `wire::auth::parse_envelope`, `Verifier::open` and `ReplayGuard::check` on
//! arbitrary bytes, and a keyed `Registrar::handle_datagram` on them and on their sealed form.
//!
//! Input: byte 0 picks the flipped byte's position for the tamper oracle; the rest is the datagram.
//!
//! Oracles besides "never panics":
//! - an accepted envelope's parts add up to the datagram (32-byte header, inner bytes, 16-byte tag) and its fields
//!   are the header's bytes;
//! - a random datagram never verifies (the key is not in the input);
//! - the input sealed with the key opens to the same inner bytes, passes the replay guard once and is refused as
//!   replayed the second time; with any one byte flipped it does not open;
//! - a keyed registrar fed the raw and the sealed bytes counts every refusal and never panics.
#![no_main]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use shoal::config::{AuthConfig, AuthKey, Config};
use shoal::registration::{Identity, Registrar};
use shoal::wire::auth::{
    AuthReject, AuthStats, Channel, ENVELOPE_HEADER_LEN, ENVELOPE_OVERHEAD, ReplayGuard, Sealer, TAG_LEN, Verifier,
    parse_envelope, unix_ns,
};

fn key() -> AuthKey {
    AuthKey::new(vec![0x5a; 32]).expect("32 bytes")
}

fn registrar() -> Registrar {
    let me = Identity {
        host_name: "fuzzhost".into(),
        pid: 1,
        process_name: "fuzz".into(),
        unit_name: "fuzz".into(),
        process_parameter: String::new(),
        shm_transport_domain: String::new(),
        network_mode: false,
    };
    let cfg = Config::default();
    let mut auth = AuthConfig::default();
    auth.key = Some(std::sync::Arc::new(key()));
    auth.protected_topics = "fuzz.*".into();
    Registrar::new(me, &cfg.registration, Instant::now())
        .with_bounds(&cfg.limits)
        .with_auth(&auth, Arc::new(AuthStats::new(true)))
        .expect("pattern compiles")
}

fuzz_target!(|input: &[u8]| {
    let Some((&flip, data)) = input.split_first() else { return };
    if let Ok(env) = parse_envelope(data) {
        assert_eq!(ENVELOPE_HEADER_LEN + env.inner.len() + TAG_LEN, data.len());
        assert_eq!(env.sender_id.to_le_bytes(), data[8..16]);
        assert_eq!(env.counter.to_le_bytes(), data[16..24]);
        assert_eq!(env.time_ns.to_le_bytes(), data[24..32]);
        assert_eq!(env.tag, &data[data.len() - TAG_LEN..]);
    }
    let verifier = Verifier::new(&key(), Channel::Registration);
    assert!(verifier.open(data).is_err(), "a datagram not sealed with the key verified");

    let now_ns = unix_ns();
    let mut sealer = Sealer::with_sender_id(&key(), Channel::Registration, 99);
    let sealed = sealer.seal(data, now_ns);
    assert_eq!(sealed.len(), data.len() + ENVELOPE_OVERHEAD);
    let env = verifier.open(&sealed).expect("our own sealed datagram opens");
    assert_eq!(env.inner, data);
    let mut guard = ReplayGuard::new(4, Duration::from_secs(60));
    let now = Instant::now();
    assert_eq!(guard.check(&env, now, now_ns), Ok(()));
    assert_eq!(guard.check(&env, now, now_ns), Err(AuthReject::Replayed));
    let mut tampered = sealed.clone();
    let i = usize::from(flip) % tampered.len();
    tampered[i] ^= 0x80;
    assert!(verifier.open(&tampered).is_err(), "byte {i} flipped and still verified");
    assert!(Verifier::new(&key(), Channel::Data).open(&sealed).is_err(), "opened on the other channel");

    let mut reg = registrar();
    let from = SocketAddr::from(([127, 0, 0, 1], 14000));
    reg.handle_datagram(now, from, data);
    reg.handle_datagram(now, from, &sealed);
    reg.handle_datagram(now, from, &sealed);
    reg.handle_datagram(now, from, &tampered);
    let s = reg.auth_stats().summary();
    assert!(s.registration.replayed >= 1, "the second sealed copy was not refused: {s:?}");
    while reg.poll_transmit().is_some() {}
});
