//! Prints every message on topic `hello`, with its publisher and latency.

fn main() -> anyhow::Result<()> {
    let node = shoal::Node::init("hello_sub")?;
    let sub = node.subscriber("hello").create()?;
    loop {
        let s = sub.recv()?;
        let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_micros() as i64;
        eprintln!(
            "{:?} from publisher {} (clock {}, {} µs after sending)",
            String::from_utf8_lossy(s.payload()),
            s.publisher_id(),
            s.clock(),
            now_us - s.send_time_us()
        );
    }
}
