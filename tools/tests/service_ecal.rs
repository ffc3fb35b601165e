//! Services against the real eCAL 6.1.1 (the `eclipse-ecal` wheel; peers `tools/tests/ecal/svc_server.py` and
//! `svc_client.py`), in local mode: an eCAL client calls a shoal server, a shoal client calls an eCAL server, and
//! each sees the other's registration (methods and their types).

mod support;

use std::time::{Duration, Instant};

use shoal::monitor::ServiceRole;
use shoal::{CallStatus, Node, TypeInfo};
use support::{ecal_peer, topic};

const T: Duration = Duration::from_secs(20);

fn node() -> Node {
    Node::init_with_config("service_ecal_test", shoal::Config::default()).expect("init")
}

#[test]
fn an_ecal_client_calls_a_shoal_server() {
    let node = node();
    let name = topic("svc_shoal_server");
    let _server = node
        .service_server(&name)
        .method(
            "echo",
            TypeInfo::new("req_t", "raw", vec![]),
            TypeInfo::new("resp_t", "raw", vec![]),
            |req: &[u8]| {
                let mut out = b"shoal:".to_vec();
                out.extend_from_slice(req);
                Ok(out)
            },
        )
        .method("fail", TypeInfo::raw(""), TypeInfo::raw(""), |_: &[u8]| Err("refused by shoal".into()))
        .build()
        .expect("server");

    let echo =
        ecal_peer("svc_client.py echo", "svc_client.py", &["--service", &name, "--method", "echo", "--count", "3"]);
    let lines = echo.until("done", T);
    let responses: Vec<_> = lines.iter().filter(|l| l["event"] == "response").collect();
    assert_eq!(responses.len(), 3, "{}", echo.report());
    for r in &responses {
        assert_eq!(r["call_state"], "executed", "{r}");
        assert_eq!(r["response"], "shoal:hello", "{r}");
        assert_eq!(r["server_pid"], std::process::id(), "{r}");
    }

    let fail = ecal_peer("svc_client.py fail", "svc_client.py", &["--service", &name, "--method", "fail"]);
    let lines = fail.until("done", T);
    let r = lines.iter().find(|l| l["event"] == "response").unwrap_or_else(|| panic!("{}", fail.report()));
    assert_eq!(r["call_state"], "failed", "{r}");
    assert!(r["error"].as_str().unwrap_or_default().contains("refused by shoal"), "{r}");
}

#[test]
fn a_shoal_client_calls_an_ecal_server() {
    let node = node();
    let name = topic("svc_ecal_server");
    let server = ecal_peer("svc_server.py", "svc_server.py", &["--service", &name, "--seconds", "30"]);
    let ready = server.expect("ready", T);
    let ecal_id: u64 = ready["service_id"].as_str().and_then(|s| s.parse().ok()).expect("service id");

    let client = node.service_client(&name).method("echo", TypeInfo::raw("req_t"), TypeInfo::raw("resp_t")).build();
    assert_eq!(client.wait_for_servers(1, T), Ok(1));
    for i in 0..3 {
        let req = format!("hi {i}");
        let r = client.call("echo", req.as_bytes(), Duration::from_secs(5)).expect("call");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, CallStatus::Executed, "{r:?}");
        assert_eq!(r[0].payload, format!("echo:{req}").into_bytes());
        assert_eq!((r[0].server.pid, r[0].server.entity_id), (server.pid(), ecal_id));
    }
    // eCAL's callback return value comes through.
    let r = client.call("fail", b"", Duration::from_secs(5)).expect("call");
    assert_eq!((r[0].status.clone(), r[0].ret_state), (CallStatus::Executed, 7));
    assert_eq!(r[0].payload, b"failed on purpose");
    // An unknown method: eCAL's server answers failed, with its message.
    let r = client.call("nope", b"", Duration::from_secs(5)).expect("call");
    assert!(matches!(&r[0].status, CallStatus::Failed(m) if m.contains("nope")), "{r:?}");

    // The eCAL server's registration as shoal reads it: its methods and their types.
    let deadline = Instant::now() + T;
    loop {
        let snap = node.snapshot();
        // eCAL announces the server at once and its methods with its next registration.
        let server_entry = snap.services.iter().find(|s| s.service_name == name && s.role == ServiceRole::Server);
        if let Some(s) = server_entry
            && let Some(echo) = s.methods.iter().find(|m| m.name == "echo")
            && echo.call_count >= 3
        {
            assert_eq!((echo.request.name.as_str(), echo.request.encoding.as_str()), ("req_t", "raw"));
            assert_eq!(echo.response.name, "resp_t");
            assert!(s.methods.iter().any(|m| m.name == "fail"));
            break;
        }
        assert!(Instant::now() < deadline, "eCAL server not in shoal's snapshot: {:?}", snap.services);
        std::thread::sleep(Duration::from_millis(100));
    }
    server.signal(libc::SIGTERM);
    let calls = server.until("done", T);
    assert!(calls.iter().filter(|l| l["event"] == "call").count() >= 4);
}
