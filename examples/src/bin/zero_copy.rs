//! Zero-copy publishing: loan a shared-memory slot, write the message in place, send it.
//! A subscriber reads it in place with `recv_with`, copying out only the header bytes it needs.

use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let node = shoal::Node::init("zero_copy")?;
    let sub = node.subscriber("images").create()?;
    let mut publ = node.publisher("images").type_info(shoal::TypeInfo::raw("demo.Image")).create()?;
    let _ = publ.wait_for_subscribers(1, Duration::from_secs(5));
    for frame in 0u32..5 {
        // 1 MiB written straight into the slot that subscribers will read.
        publ.loan(1 << 20)?
            .write(|buf| {
                buf[..4].copy_from_slice(&frame.to_le_bytes());
                buf[4..].fill(frame as u8);
            })
            .send();
        // The view copies out only the bytes asked for (here 5 of the 1 MiB), never lending a slice of a slot the
        // publisher may be overwriting.
        let (n, first) = sub.recv_with(Some(Duration::from_secs(1)), |s| {
            let [a, b, c, d, pixel] = s.payload().read_array(0).unwrap_or_default();
            (u32::from_le_bytes([a, b, c, d]), pixel)
        })?;
        eprintln!("frame {n}: first pixel {first}");
    }
    Ok(())
}
