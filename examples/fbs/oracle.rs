//! The FlatBuffers oracle of `examples/tests/fbs_compat.rs` (not a target of this crate): `examples/fbs/pose.fbs` as Google's `flatc --rust`
//! generates it, over the official `flatbuffers` crate. Built by that test in a crate of its own under `target/`
//! (flatc's output is not committed).
//!
//! `fbs_oracle write` prints the bytes of one fixed `demo.Pose`; `fbs_oracle read` reads a `demo.Pose` from stdin,
//! checks it with the official verifier and prints its fields, one `name=value` per line.

#[allow(clippy::all, unused_imports, dead_code, non_camel_case_types, mismatched_lifetime_syntaxes)]
mod pose_generated;

use std::io::{Read, Write};

use pose_generated::demo::{
    Mode, Pose, PoseArgs, Vec3, Waypoint, WaypointArgs, finish_pose_buffer, root_as_pose,
};

fn write() {
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let names = [("dock", Vec3::new(3.0, 4.0, 0.0)), ("home", Vec3::new(0.0, 0.0, 0.0))];
    let route: Vec<_> = names
        .iter()
        .map(|(n, p)| {
            let name = b.create_string(n);
            Waypoint::create(&mut b, &WaypointArgs { name: Some(name), position: Some(p) })
        })
        .collect();
    let route = b.create_vector(&route);
    let frame_id = b.create_string("map");
    let position = Vec3::new(1.5, -2.0, 0.25);
    let pose = Pose::create(
        &mut b,
        &PoseArgs {
            seq: 42,
            frame_id: Some(frame_id),
            position: Some(&position),
            heading_rad: 0.75,
            mode: Mode::Docking,
            route: Some(route),
        },
    );
    finish_pose_buffer(&mut b, pose);
    std::io::stdout().write_all(b.finished_data()).expect("stdout");
}

fn read() {
    let mut buf = Vec::new();
    std::io::stdin().read_to_end(&mut buf).expect("stdin");
    let p = root_as_pose(&buf).expect("the official verifier accepts the buffer");
    let v = |v: Option<&Vec3>| v.map_or("none".to_string(), |v| format!("{},{},{}", v.x(), v.y(), v.z()));
    println!("seq={}", p.seq());
    println!("frame_id={}", p.frame_id().unwrap_or("none"));
    println!("position={}", v(p.position()));
    println!("heading_rad={}", p.heading_rad());
    println!("mode={}", p.mode().variant_name().unwrap_or("unknown"));
    let route: Vec<String> = p
        .route()
        .map(|r| r.iter().map(|w| format!("{}@{}", w.name().unwrap_or("none"), v(w.position()))).collect())
        .unwrap_or_default();
    println!("route={}", route.join(";"));
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("write") => write(),
        Some("read") => read(),
        _ => {
            eprintln!("usage: fbs_oracle write|read");
            std::process::exit(2);
        }
    }
}
