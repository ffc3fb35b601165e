//! Publishes "hello N" on topic `hello` ten times a second. Run `hello_sub` in another terminal.

use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let node = shoal::Node::init("hello_pub")?;
    let mut publ = node.publisher("hello").type_info(shoal::TypeInfo::raw("std.string")).create()?;
    for n in 0.. {
        let text = format!("hello {n}");
        publ.send(text.as_bytes())?;
        eprintln!("sent {text:?} ({} subscribers)", publ.subscriber_count());
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
