//! The builder on schemas in a temporary directory: good ones generate code, broken ones fail with the schema
//! compiler's file, line and message.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory under the system's temporary one, removed with what it holds when dropped.
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(name: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("shoal-codegen-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn broken_proto_reports_file_line_and_message() {
    let d = temp_dir("badproto");
    let f =
        write(&d, "broken.proto", "syntax = \"proto3\";\npackage x;\nmessage M {\n  int32 a = 1\n  double b = 2;\n}\n");
    let err = shoal_codegen::Builder::new()
        .proto_files([&f])
        .include_dirs([&*d])
        .out_dir(d.join("out"))
        .compile()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("broken.proto:5:3"), "{text}");
    assert!(text.contains("expected ';'"), "{text}");
    // Debug (what `main() -> Result<_, Box<dyn Error>>` prints) shows the same text.
    assert_eq!(format!("{err:?}"), text);
    // protox's error is kept as the source, not only as text.
    let source = std::error::Error::source(&err).expect("the schema error keeps protox's error as its source");
    assert!(source.is::<protox::Error>(), "{source:?}");
}

#[test]
fn missing_import_is_reported() {
    let d = temp_dir("importproto");
    let f = write(&d, "a.proto", "syntax = \"proto3\";\nimport \"nowhere.proto\";\nmessage A {}\n");
    let err = shoal_codegen::Builder::new().proto_files([&f]).include_dirs([&*d]).out_dir(d.join("out")).compile();
    let text = err.unwrap_err().to_string();
    assert!(text.contains("nowhere.proto"), "{text}");
}

#[test]
fn good_schemas_generate_impls_and_ecal_descriptors() {
    let d = temp_dir("good");
    let p = write(
        &d,
        "m.proto",
        "syntax = \"proto3\";\npackage a.b;\nimport \"google/protobuf/timestamp.proto\";\n\
         message Outer { message Inner { int32 v = 1; } google.protobuf.Timestamp t = 1; map<string, int32> m = 2; \
         Inner i = 3; int32 camelField = 4; }\n",
    );
    let f = write(&d, "t.fbs", "namespace n.m;\ntable T { x: int; }\nroot_type T;\n");
    let out = d.join("out");
    let g = shoal_codegen::Builder::new()
        .proto_files([&p])
        .include_dirs([&*d])
        .fbs_files([&f])
        .out_dir(&out)
        .compile()
        .unwrap();
    assert_eq!(g.proto_messages, ["a.b.Outer", "a.b.Outer.Inner"]);
    assert_eq!(g.fbs_tables, ["n.m.T"]);
    let proto = std::fs::read_to_string(g.proto_include.unwrap()).unwrap();
    assert!(proto.contains("impl ::shoal::Message for self::Outer"), "{proto}");
    assert!(proto.contains("impl ::shoal::Message for self::outer::Inner"), "{proto}");
    assert!(proto.contains("pub mod a {") && proto.contains("pub mod b {"), "{proto}");
    let fbs = std::fs::read_to_string(g.fbs_include.unwrap()).unwrap();
    assert!(fbs.contains("impl ::shoal::Message for self::n::m::T"), "{fbs}");
    assert!(fbs.contains("type View<'a> = self::n::m::TRef<'a>"), "{fbs}");

    // The descriptor: imports first, each once, json_name set, no source info (as eCAL's Python helper writes it).
    use prost::Message as _;
    let fds =
        prost_types::FileDescriptorSet::decode(std::fs::read(out.join("shoal_fds_1.bin")).unwrap().as_slice()).unwrap();
    let names: Vec<&str> = fds.file.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["google/protobuf/timestamp.proto", "m.proto"]);
    assert!(fds.file.iter().all(|f| f.source_code_info.is_none()));
    let camel = fds.file[1].message_type[0].field.iter().find(|f| f.name() == "camelField").unwrap();
    assert_eq!(camel.json_name(), "camelField");
}

/// Runs the builder on a broken `.fbs` (in a child process: planus prints its diagnostics to stderr).
#[test]
fn broken_fbs_reports_file_line_and_message() {
    if let Ok(dir) = std::env::var("SHOAL_CODEGEN_FBS_CHILD") {
        let d = PathBuf::from(dir);
        let err = shoal_codegen::Builder::new()
            .fbs_files([d.join("broken.fbs")])
            .out_dir(d.join("out"))
            .compile()
            .unwrap_err();
        eprintln!("RETURNED: {err}");
        return;
    }
    let d = temp_dir("badfbs");
    write(&d, "broken.fbs", "namespace demo;\n\ntable Pose {\n  seq: ulong;\n  frame: strin;\n}\n");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "broken_fbs_reports_file_line_and_message", "--nocapture", "--test-threads=1"])
        .env("SHOAL_CODEGEN_FBS_CHILD", &*d)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("broken.fbs:5:"), "{stderr}");
    assert!(stderr.contains("strin"), "{stderr}");
    assert!(stderr.contains("RETURNED: flatbuffers schema error in"), "{stderr}");
}
