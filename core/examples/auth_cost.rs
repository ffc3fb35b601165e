//! What `[shoal_auth]` costs per UDP datagram, against the same datagram without it, in one run:
//!
//! ```text
//! cargo run --release -p shoal --example auth_cost [ROUNDS]
//! ```
//!
//! For 64-byte and 65,000-byte datagrams (the largest the sealed form still fits in one UDP datagram), each round
//! measures, alternately, (a) send + receive over loopback of the plain datagram, (b) the same with the envelope:
//! seal (header and tag around the unchanged bytes, sent as one vectored datagram, as the UDP layer does), receive,
//! verify the tag, check the replay window; and the CPU time of seal + open alone. It prints the median over the
//! rounds of ns per datagram and the ratio sealed / plain.

use std::io::IoSlice;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use shoal::config::AuthKey;
use shoal::wire::auth::{Channel, ReplayGuard, Sealer, Verifier, is_envelope, unix_ns};

fn socket_pair() -> (socket2::Socket, std::net::UdpSocket, socket2::SockAddr) {
    let new = || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))
            .expect("socket");
        s.set_recv_buffer_size(8 << 20).expect("SO_RCVBUF");
        s.set_send_buffer_size(8 << 20).expect("SO_SNDBUF");
        s.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).expect("bind");
        s
    };
    let (tx, rx) = (new(), new());
    let to = rx.local_addr().expect("addr");
    (tx, rx.into(), to)
}

fn recv(rx: &std::net::UdpSocket, buf: &mut [u8]) -> usize {
    rx.recv(buf).expect("recv")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(9);
    let key = AuthKey::new(vec![7; 32]).expect("key");
    let (tx, rx, to) = socket_pair();
    let mut buf = vec![0u8; 65_536];
    println!("{:>8} {:>14} {:>14} {:>7} {:>16}", "bytes", "plain ns/dgram", "sealed ns/dgram", "ratio", "seal+open ns");
    for size in [64usize, 65_000] {
        let datagram: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let n = if size < 1000 { 20_000 } else { 2_000 };
        let (mut plain, mut sealed, mut cpu) = (Vec::new(), Vec::new(), Vec::new());
        let mut sealer = Sealer::new(&key, Channel::Data);
        let verifier = Verifier::new(&key, Channel::Data);
        let mut guard = ReplayGuard::new(16, Duration::from_secs(60));
        for _ in 0..rounds {
            let t = Instant::now();
            for _ in 0..n {
                tx.send_to(&datagram, &to).expect("send");
                let got = recv(&rx, &mut buf);
                assert_eq!(got, size);
            }
            plain.push(t.elapsed().as_nanos() as f64 / n as f64);

            let t = Instant::now();
            for _ in 0..n {
                let (head, tag) = sealer.seal_parts(&[&datagram], unix_ns());
                let parts = [IoSlice::new(&head), IoSlice::new(&datagram), IoSlice::new(&tag)];
                tx.send_to_vectored(&parts, &to).expect("send");
                let got = recv(&rx, &mut buf);
                let d = &buf[..got];
                assert!(is_envelope(d));
                let env = verifier.open(d).expect("verifies");
                guard.check(&env, Instant::now(), unix_ns()).expect("new counter");
                assert_eq!(env.inner.len(), size);
            }
            sealed.push(t.elapsed().as_nanos() as f64 / n as f64);

            let t = Instant::now();
            for _ in 0..n {
                let d = sealer.seal(&datagram, unix_ns());
                let env = verifier.open(&d).expect("verifies");
                std::hint::black_box(env.counter);
            }
            cpu.push(t.elapsed().as_nanos() as f64 / n as f64);
        }
        let (p, s, c) = (median(plain), median(sealed), median(cpu));
        println!("{size:>8} {p:>14.0} {s:>14.0} {:>7.2} {c:>16.0}", s / p);
    }
}
