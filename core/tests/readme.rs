//! The README's "Use it" snippet, run as written, receives both messages it sends: the 5-byte copy and the 1 MiB
//! loan (with the default queue policy the small message is not pushed out by the large one).

const README: &str = include_str!("../../README.md");

/// The code of the snippet, line by line, as the README has it (checked below, so the two cannot drift apart).
const SNIPPET: &[&str] = &[
    r#"let node = shoal::Node::init("my_unit")?;                       // reads ecal.ini if there is one"#,
    r#"let mut publ = node.publisher("camera").type_info(shoal::TypeInfo::raw("demo.Image")).create()?;"#,
    r#"let sub = node.subscriber("camera").create()?;                  // in this process or any other on the host"#,
    r#""#,
    r#"publ.send(b"bytes")?;                                           // copy into the ring"#,
    r#"publ.loan(1 << 20)?.write(|buf| buf.fill(7)).send();            // zero-copy: write in the slot, then send"#,
    r#"let sample = sub.recv_timeout(std::time::Duration::from_secs(1))?;"#,
    r#"println!("{} bytes, clock {}, from {}", sample.payload().len(), sample.clock(), sample.publisher_id());"#,
];

#[test]
fn the_snippet_below_is_the_readme_s() {
    let start = README.find("## Use it").expect("README has a \"Use it\" section");
    let code = &README[start..];
    let code = &code[code.find("```rust\n").expect("a rust block") + "```rust\n".len()..];
    let code = &code[..code.find("```").expect("the block ends")];
    let lines: Vec<&str> = code.lines().collect();
    assert_eq!(lines, SNIPPET, "README.md's \"Use it\" snippet changed: update SNIPPET and the test below");
}

#[test]
fn the_readme_snippet_receives_both_messages() -> Result<(), Box<dyn std::error::Error>> {
    // ---- the snippet, as written (SNIPPET) ----
    let node = shoal::Node::init("my_unit")?; // reads ecal.ini if there is one
    let mut publ = node.publisher("camera").type_info(shoal::TypeInfo::raw("demo.Image")).create()?;
    let sub = node.subscriber("camera").create()?; // in this process or any other on the host

    publ.send(b"bytes")?; // copy into the ring
    publ.loan(1 << 20)?.write(|buf| buf.fill(7)).send(); // zero-copy: write in the slot, then send
    let sample = sub.recv_timeout(std::time::Duration::from_secs(1))?;
    println!("{} bytes, clock {}, from {}", sample.payload().len(), sample.clock(), sample.publisher_id());
    // ---- end of the snippet ----
    assert_eq!((sample.payload(), sample.clock(), sample.publisher_id()), (&b"bytes"[..], 1, publ.id()));
    let second = sub.recv_timeout(std::time::Duration::from_secs(1))?;
    assert_eq!((second.payload().len(), second.clock()), (1 << 20, 2));
    assert!(second.payload().iter().all(|b| *b == 7));
    assert_eq!(sub.drops(), 0);
    Ok(())
}

/// The README's "Services" snippet, line by line.
const SERVICE_SNIPPET: &[&str] = &[
    r#"let raw = shoal::TypeInfo::raw("");"#,
    r#"let server = node.service_server("math")                        // eCAL's ServiceServer, on the same wire"#,
    r#"    .method("echo", raw.clone(), raw, |req: &[u8]| Ok(req.to_vec()))"#,
    r#"    .build()?;"#,
    r#"let client = node.service_client("math").build();"#,
    r#"client.wait_for_servers(1, std::time::Duration::from_secs(5))?;"#,
    r#"for r in client.call("echo", b"hi", std::time::Duration::from_secs(1))? {   // one response per server"#,
    r#"    println!("{} pid {}: {:?} {:?}", r.server.host_name, r.server.pid, r.status, r.payload);"#,
    r#"}"#,
];

#[test]
fn the_service_snippet_below_is_the_readme_s() {
    let start = README.find("## Services").expect("README has a \"Services\" section");
    let code = &README[start..];
    let code = &code[code.find("```rust\n").expect("a rust block") + "```rust\n".len()..];
    let code = &code[..code.find("```").expect("the block ends")];
    let lines: Vec<&str> = code.lines().collect();
    assert_eq!(lines, SERVICE_SNIPPET, "README.md's \"Services\" snippet changed: update SERVICE_SNIPPET and the test");
}

#[test]
fn the_readme_service_snippet_gets_its_answer() -> Result<(), Box<dyn std::error::Error>> {
    let node = shoal::Node::init("my_unit")?;
    // ---- the snippet, as written (SERVICE_SNIPPET) ----
    let raw = shoal::TypeInfo::raw("");
    let server = node
        .service_server("math") // eCAL's ServiceServer, on the same wire
        .method("echo", raw.clone(), raw, |req: &[u8]| Ok(req.to_vec()))
        .build()?;
    let client = node.service_client("math").build();
    client.wait_for_servers(1, std::time::Duration::from_secs(5))?;
    for r in client.call("echo", b"hi", std::time::Duration::from_secs(1))? {
        // one response per server
        println!("{} pid {}: {:?} {:?}", r.server.host_name, r.server.pid, r.status, r.payload);
    }
    // ---- end of the snippet ----
    // Another test process may serve "math" too: this one's answer is among the responses.
    let mine = client.call("echo", b"hi", std::time::Duration::from_secs(1))?;
    assert!(mine.iter().any(|r| r.server.entity_id == server.id() && r.is_ok() && r.payload == b"hi"), "{mine:?}");
    Ok(())
}
