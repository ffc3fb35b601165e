//! Services between two "hosts" (network namespaces joined by a veth pair, each process with its own host name), in
//! network mode, against eCAL 6.1.1: `shoal service call` on one host calls an eCAL server on the other, an eCAL
//! client calls a `shoal-peer serve` server on the other. The client reaches the server at the address its
//! registration came from.
//!
//! Needs root (`ip netns`); without it every test here prints why and passes without running.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{NetnsPair, Proc, ecal_network_dir, ecal_python, root_or_skip, script, topic, write_ini};

const T: Duration = Duration::from_secs(20);

fn network_ini(name: &str) -> String {
    write_ini(name, "[network]\nnetwork_enabled = true\n")
}

fn ecal_in(net: &NetnsPair, i: usize, host: &str, name: &str, script_name: &str, args: &[&str]) -> Proc {
    let python = ecal_python();
    let path = script(script_name);
    let mut all = vec![path.as_str()];
    all.extend_from_slice(args);
    let mut cmd = net.command(i, host, &python, &all);
    cmd.current_dir(ecal_network_dir());
    Proc::spawn(name, cmd)
}

fn lines_of(p: &Proc, event: &str) -> Vec<Value> {
    p.until("done", T).into_iter().filter(|l| l["event"] == event).collect()
}

#[test]
fn shoal_service_call_reaches_an_ecal_server_on_another_host() {
    if !root_or_skip("shoal_service_call_reaches_an_ecal_server_on_another_host") {
        return;
    }
    let net = NetnsPair::create("sv", 21);
    let hosts = ["ecal-srv", "shoal-cli"];
    net.hosts(hosts);
    let name = topic("svc_net_ecal_server");
    let server = ecal_in(&net, 0, hosts[0], "eCAL server", "svc_server.py", &["--service", &name, "--seconds", "30"]);
    server.expect("ready", T);

    let ini = network_ini("svc_net_call");
    let mut cmd = net.command(
        1,
        hosts[1],
        env!("CARGO_BIN_EXE_shoal"),
        &["service", "call", &name, "echo", "--data", "across", "--json", "--wait-ms", "10000", "--timeout-ms", "5000"],
    );
    cmd.env("ECAL_INI", &ini);
    let out = cmd.output().expect("run shoal service call");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "shoal service call failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_str(stdout.lines().next().unwrap_or_default()).expect("a JSON response line");
    assert_eq!((r["status"].as_str(), r["response"].as_str()), (Some("executed"), Some("echo:across")), "{r}");
    assert_eq!(r["host"], hosts[0]);
    server.signal(libc::SIGTERM);
    assert_eq!(lines_of(&server, "call").len(), 1);
}

#[test]
fn an_ecal_client_calls_a_shoal_server_on_another_host() {
    if !root_or_skip("an_ecal_client_calls_a_shoal_server_on_another_host") {
        return;
    }
    let net = NetnsPair::create("sw", 22);
    let hosts = ["shoal-srv", "ecal-cli"];
    net.hosts(hosts);
    let name = topic("svc_net_shoal_server");
    let ini = network_ini("svc_net_serve");
    let mut cmd = net.command(
        0,
        hosts[0],
        env!("CARGO_BIN_EXE_shoal-peer"),
        &["serve", "--service", &name, "--duration-ms", "30000"],
    );
    cmd.env("ECAL_INI", &ini);
    let server = Proc::spawn("shoal server", cmd);
    server.expect("ready", T);

    let client = ecal_in(
        &net,
        1,
        hosts[1],
        "eCAL client",
        "svc_client.py",
        &["--service", &name, "--method", "echo", "--request", "over the wire", "--count", "3"],
    );
    let responses = lines_of(&client, "response");
    assert_eq!(responses.len(), 3, "{}", client.report());
    for r in &responses {
        assert_eq!((r["call_state"].as_str(), r["response"].as_str()), (Some("executed"), Some("shoal:over the wire")));
        assert_eq!(r["server_host"], hosts[0]);
    }
    server.signal(libc::SIGTERM);
    assert_eq!(lines_of(&server, "call").len(), 3);
}
