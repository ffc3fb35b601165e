//! shoal-codegen: typed shoal messages from `.proto` and `.fbs` schemas, generated in a build script, with no
//! `protoc` or `flatc` installed.
//!
//! - `.proto` files are compiled by [protox] (pure Rust) and turned into Rust types by prost-build; every message
//!   implements `shoal::Message` with the type information eCAL writes (`pkg.Msg`, `proto`, the serialized
//!   `FileDescriptorSet` of the message's file and its imports, dependencies first).
//! - Every `service` of a `.proto` gives a server trait `<Service>Server` (one method per RPC, typed request →
//!   typed response or `shoal::service::HandlerError`; `serve(&node)` offers it as service `pkg.Service`) and a
//!   client `<Service>Client` (one method per RPC, returning a `shoal::service::TypedResponse` per server).
//!   Streaming RPCs, which eCAL does not have, are skipped.
//! - `.fbs` files are compiled by planus; every table implements `shoal::Message` (`ns.Table`, `flatb`, no
//!   descriptor: planus cannot write a binary schema) with a zero-copy view `TableRef<'a>`.
//!
//! ```no_run
//! // build.rs
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     shoal_codegen::Builder::new()
//!         .proto_files(["proto/imu.proto"])
//!         .include_dirs(["proto"])
//!         .fbs_files(["fbs/pose.fbs"])
//!         .compile()?;
//!     Ok(())
//! }
//! // main.rs: mod proto { shoal::include_proto!(); }   mod fbs { shoal::include_fbs!(); }
//! ```
//!
//! The user crate depends on `shoal`, `prost` (0.14) and `prost-types` for protobuf, and on `planus` (=1.3.0)
//! and `serde` (with `derive`; planus's generated code derives it) for FlatBuffers.
//!
//! A schema error fails the build: protobuf errors carry `file:line:column: message`; planus prints its
//! diagnostics (`file:line:column`, with the source line) on the build script's stderr, which cargo shows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use heck::{ToSnakeCase, ToUpperCamelCase};
use prost::Message as _;
use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};

/// The file, in the output directory, that `shoal::include_proto!()` includes.
pub const PROTO_INCLUDE_FILE: &str = "shoal_proto.rs";
/// The file, in the output directory, that `shoal::include_fbs!()` includes.
pub const FBS_INCLUDE_FILE: &str = "shoal_fbs.rs";

/// Errors of [`Builder::compile`]. `Debug` prints the same text as `Display`, so that a build script's
/// `main() -> Result<(), Box<dyn Error>>` shows the schema error as it is.
#[derive(thiserror::Error)]
pub enum CodegenError {
    /// No output directory: not run from a build script and none given with [`Builder::out_dir`].
    #[error("no output directory: OUT_DIR is not set (run from build.rs or call Builder::out_dir)")]
    NoOutDir,
    /// A `.proto` file could not be compiled. The message shows protox's error as its `Debug` does, which starts
    /// with `file:line:column:` (its `Display` has the message alone).
    #[error("protobuf schema error: {0:?}")]
    Proto(#[source] protox::Error),
    /// prost-build could not generate the Rust code.
    #[error("prost-build: {0}")]
    ProstBuild(#[source] std::io::Error),
    /// planus rejected the `.fbs` files; its diagnostics (file:line:column and message) went to stderr.
    #[error(
        "flatbuffers schema error in {files}: see the planus diagnostics printed above (file:line:column: message)"
    )]
    Fbs {
        /// The files given.
        files: String,
    },
    /// planus could not generate the Rust code (planus's `eyre::Report`, boxed: the report is not a
    /// `std::error::Error` itself).
    #[error("planus code generation: {0}")]
    FbsCodegen(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An input or output file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl std::fmt::Debug for CodegenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// What [`Builder::compile`] generated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Generated {
    /// Full names of the protobuf messages that implement `shoal::Message` (e.g. `pb.Imu`, `pb.Imu.Vector3`).
    pub proto_messages: Vec<String>,
    /// Full names of the FlatBuffers tables that implement `shoal::Message` (e.g. `demo.Pose`).
    pub fbs_tables: Vec<String>,
    /// The file to include for protobuf (`shoal::include_proto!()`), if any `.proto` was given.
    pub proto_include: Option<PathBuf>,
    /// The file to include for FlatBuffers (`shoal::include_fbs!()`), if any `.fbs` was given.
    pub fbs_include: Option<PathBuf>,
}

/// Configures and runs the code generation (builder style).
#[derive(Debug, Clone, Default)]
pub struct Builder {
    proto_files: Vec<PathBuf>,
    include_dirs: Vec<PathBuf>,
    fbs_files: Vec<PathBuf>,
    out_dir: Option<PathBuf>,
}

impl Builder {
    /// An empty builder.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// `.proto` files to compile (paths as given, or relative to an include directory).
    pub fn proto_files<I, P>(mut self, files: I) -> Builder
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        self.proto_files.extend(files.into_iter().map(|p| p.as_ref().to_path_buf()));
        self
    }

    /// Directories searched for `.proto` imports (the well-known types `google/protobuf/*.proto` are built in).
    /// Without any, the directory of each `.proto` file is used.
    pub fn include_dirs<I, P>(mut self, dirs: I) -> Builder
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        self.include_dirs.extend(dirs.into_iter().map(|p| p.as_ref().to_path_buf()));
        self
    }

    /// `.fbs` files to compile (their `include`s are followed).
    pub fn fbs_files<I, P>(mut self, files: I) -> Builder
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        self.fbs_files.extend(files.into_iter().map(|p| p.as_ref().to_path_buf()));
        self
    }

    /// Where to write the generated code (default: `$OUT_DIR`). Outside a build script, no
    /// `cargo:rerun-if-changed` lines are printed.
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Builder {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Compiles every schema and writes [`PROTO_INCLUDE_FILE`] and/or [`FBS_INCLUDE_FILE`] into the output
    /// directory.
    pub fn compile(self) -> Result<Generated, CodegenError> {
        let in_build_script = self.out_dir.is_none();
        let out = match &self.out_dir {
            Some(d) => d.clone(),
            None => std::env::var_os("OUT_DIR").map(PathBuf::from).ok_or(CodegenError::NoOutDir)?,
        };
        if in_build_script {
            for p in self.proto_files.iter().chain(&self.include_dirs).chain(&self.fbs_files) {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
        let mut generated = Generated::default();
        if !self.proto_files.is_empty() {
            let (names, path) = self.compile_proto(&out)?;
            generated.proto_messages = names;
            generated.proto_include = Some(path);
        }
        if !self.fbs_files.is_empty() {
            let (names, path) = self.compile_fbs(&out)?;
            generated.fbs_tables = names;
            generated.fbs_include = Some(path);
        }
        Ok(generated)
    }

    fn compile_proto(&self, out: &Path) -> Result<(Vec<String>, PathBuf), CodegenError> {
        let includes: Vec<PathBuf> = if self.include_dirs.is_empty() {
            let mut dirs: Vec<PathBuf> = Vec::new();
            for f in &self.proto_files {
                let d = f.parent().map(Path::to_path_buf).unwrap_or_default();
                let d = if d.as_os_str().is_empty() { PathBuf::from(".") } else { d };
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
            dirs
        } else {
            self.include_dirs.clone()
        };
        let mut compiler = protox::Compiler::new(&includes).map_err(CodegenError::Proto)?;
        compiler.include_imports(true).include_source_info(false);
        compiler.open_files(&self.proto_files).map_err(CodegenError::Proto)?;
        let fds = compiler.file_descriptor_set();

        std::fs::create_dir_all(out).map_err(|source| CodegenError::Io { path: out.to_path_buf(), source })?;
        prost_build::Config::new().out_dir(out).compile_fds(fds.clone()).map_err(CodegenError::ProstBuild)?;

        let by_name: HashMap<&str, &FileDescriptorProto> = fds.file.iter().map(|f| (f.name(), f)).collect();
        let rust_paths = message_paths(&fds);
        let mut tree = ModTree::default();
        let mut names = Vec::new();
        for (i, file) in fds.file.iter().enumerate() {
            let package = file.package();
            if package == "google.protobuf" {
                // The well-known types are prost-types' (`::prost_types::Timestamp`, ...): no impl here.
                continue;
            }
            let node = tree.node(package.split('.').filter(|s| !s.is_empty()).map(proto_module));
            let file_name = if package.is_empty() { "_.rs".to_string() } else { format!("{package}.rs") };
            let rs = out.join(&file_name);
            if rs.exists() && !node.includes.contains(&rs) {
                node.includes.push(rs);
            }
            let desc = ecal_descriptor_set(file.name(), &by_name).encode_to_vec();
            let desc_path = out.join(format!("shoal_fds_{i}.bin"));
            std::fs::write(&desc_path, &desc).map_err(|source| CodegenError::Io { path: desc_path.clone(), source })?;
            let mut impls = String::new();
            for msg in &file.message_type {
                proto_impls(msg, package, &[], &desc_path, &mut impls, &mut names);
            }
            let depth = package.split('.').filter(|s| !s.is_empty()).count();
            for svc in &file.service {
                service_code(svc, package, depth, &rust_paths, &mut impls);
            }
            node.code.push_str(&impls);
        }
        let mut code = String::from("// @generated by shoal-codegen from .proto files. Do not edit.\n");
        tree.render(&mut code);
        let path = out.join(PROTO_INCLUDE_FILE);
        std::fs::write(&path, code).map_err(|source| CodegenError::Io { path: path.clone(), source })?;
        Ok((names, path))
    }

    fn compile_fbs(&self, out: &Path) -> Result<(Vec<String>, PathBuf), CodegenError> {
        let files = self.fbs_files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
        for f in &self.fbs_files {
            if !f.is_file() {
                return Err(CodegenError::Io {
                    path: f.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such .fbs file"),
                });
            }
        }
        let decls = planus_translation::translate_files(&self.fbs_files).ok_or(CodegenError::Fbs { files })?;
        let mut code = String::from("// @generated by shoal-codegen (planus 1.3.0) from .fbs files. Do not edit.\n");
        let planus_code =
            planus_codegen::generate_rust(&decls, false).map_err(|e| CodegenError::FbsCodegen(e.into()))?;
        // planus's code in a module of its own, so that lints of the user crate do not apply to it.
        code.push_str(
            "#[allow(dead_code, unused, unreachable_pub, missing_docs, missing_debug_implementations, clippy::all, clippy::undocumented_unsafe_blocks)]\n\
             mod __planus {\n",
        );
        code.push_str(&planus_code);
        code.push_str("\n}\n#[allow(unreachable_pub)]\npub use __planus::*;\n");
        code.push_str(FBS_SUPPORT);
        let mut names = Vec::new();
        for (path, decl) in &decls.declarations {
            if !matches!(decl.kind, planus_types::intermediate::DeclarationKind::Table(_)) {
                continue;
            }
            let parts = &path.0;
            let Some((last, namespaces)) = parts.split_last() else { continue };
            let mut rust = String::new();
            for ns in namespaces {
                rust.push_str(&fbs_ident(&ns.to_snake_case()));
                rust.push_str("::");
            }
            let owned = format!("self::{rust}{}", fbs_ident(&last.to_upper_camel_case()));
            let view = format!("self::{rust}{}", fbs_ident(&format!("{last}Ref").to_upper_camel_case()));
            let full = parts.join(".");
            let _ = write!(
                code,
                "\nimpl ::shoal::Message for {owned} {{\n\
                 \x20   type View<'a> = {view}<'a>;\n\
                 \x20   fn type_info() -> &'static ::shoal::TypeInfo {{\n\
                 \x20       static T: ::std::sync::OnceLock<::shoal::TypeInfo> = ::std::sync::OnceLock::new();\n\
                 \x20       T.get_or_init(|| ::shoal::TypeInfo::new({full:?}, \"flatb\", ::std::vec::Vec::new()))\n\
                 \x20   }}\n\
                 \x20   fn encode(&self, sink: &mut dyn ::shoal::MessageSink) -> ::std::result::Result<(), ::shoal::EncodeError> {{\n\
                 \x20       __shoal_fbs::encode(self, sink)\n\
                 \x20   }}\n\
                 \x20   fn decode(bytes: &[u8]) -> ::std::result::Result<Self, ::shoal::DecodeError> {{\n\
                 \x20       let view = <Self as ::shoal::Message>::view(bytes)?;\n\
                 \x20       ::std::convert::TryFrom::try_from(view).map_err(|e| ::shoal::DecodeError::new(\"flatb\", {full:?}, e))\n\
                 \x20   }}\n\
                 \x20   fn view(bytes: &[u8]) -> ::std::result::Result<{view}<'_>, ::shoal::DecodeError> {{\n\
                 \x20       <{view}<'_> as ::planus::ReadAsRoot<'_>>::read_as_root(bytes).map_err(|e| ::shoal::DecodeError::new(\"flatb\", {full:?}, e))\n\
                 \x20   }}\n\
                 }}\n"
            );
            names.push(full);
        }
        std::fs::create_dir_all(out).map_err(|source| CodegenError::Io { path: out.to_path_buf(), source })?;
        let path = out.join(FBS_INCLUDE_FILE);
        std::fs::write(&path, code).map_err(|source| CodegenError::Io { path: path.clone(), source })?;
        Ok((names, path))
    }
}

/// Shared by the FlatBuffers impls: one reused planus builder per thread, copied once into the sink's buffer.
const FBS_SUPPORT: &str = r#"
#[doc(hidden)]
mod __shoal_fbs {
    ::std::thread_local! {
        static BUILDER: ::std::cell::RefCell<::planus::Builder> = ::std::cell::RefCell::new(::planus::Builder::new());
    }

    pub(super) fn encode<T: ::planus::WriteAsOffset<T>>(
        msg: &T,
        sink: &mut dyn ::shoal::MessageSink,
    ) -> ::std::result::Result<(), ::shoal::EncodeError> {
        BUILDER.with(|cell| match cell.try_borrow_mut() {
            ::std::result::Result::Ok(mut builder) => write(&mut builder, msg, sink),
            // Re-entered (an encode inside a sink): use a fresh builder.
            ::std::result::Result::Err(_) => write(&mut ::planus::Builder::new(), msg, sink),
        })
    }

    fn write<T: ::planus::WriteAsOffset<T>>(
        builder: &mut ::planus::Builder,
        msg: &T,
        sink: &mut dyn ::shoal::MessageSink,
    ) -> ::std::result::Result<(), ::shoal::EncodeError> {
        builder.clear();
        let bytes = builder.finish(msg, ::std::option::Option::None);
        sink.write_exact(bytes.len(), &mut |buf: &mut [u8]| {
            buf.copy_from_slice(bytes);
            ::std::result::Result::Ok(())
        })
    }
}
"#;

/// Module and type names as planus writes them (keywords get a `_` suffix).
fn fbs_ident(s: &str) -> String {
    const KEYWORDS: &[&str] = &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
        "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "Self",
        "self", "static", "struct", "super", "trait", "true", "type", "union", "unsafe", "use", "where", "while",
        "abstract", "become", "box", "do", "final", "macro", "override", "priv", "try", "typeof", "unsized", "virtual",
        "yield", "_",
    ];
    if KEYWORDS.contains(&s) { format!("{s}_") } else { s.to_string() }
}

/// A Rust identifier as prost-build sanitizes it.
fn sanitize(ident: String) -> String {
    match ident.as_str() {
        "as" | "break" | "const" | "continue" | "else" | "enum" | "false" | "fn" | "for" | "if" | "impl" | "in"
        | "let" | "loop" | "match" | "mod" | "move" | "mut" | "pub" | "ref" | "return" | "static" | "struct"
        | "trait" | "true" | "type" | "unsafe" | "use" | "where" | "while" | "dyn" | "abstract" | "become" | "box"
        | "do" | "final" | "macro" | "override" | "priv" | "typeof" | "unsized" | "virtual" | "yield" | "async"
        | "await" | "try" | "gen" => format!("r#{ident}"),
        "_" | "super" | "self" | "Self" | "extern" | "crate" => format!("{ident}_"),
        s if s.starts_with(|c: char| c.is_numeric()) => format!("_{ident}"),
        _ => ident,
    }
}

/// prost-build's module name for a package segment or an enclosing message.
fn proto_module(s: &str) -> String {
    sanitize(s.to_snake_case())
}

/// prost-build's type name for a message.
fn proto_type(s: &str) -> String {
    sanitize(s.to_upper_camel_case())
}

/// `impl shoal::Message` for `msg` and its nested messages (map entries excluded: prost makes them `HashMap`s).
fn proto_impls(
    msg: &DescriptorProto,
    package: &str,
    outer: &[&str],
    desc_path: &Path,
    code: &mut String,
    names: &mut Vec<String>,
) {
    if msg.options.as_ref().is_some_and(|o| o.map_entry()) {
        return;
    }
    let mut full = String::from(package);
    for o in outer {
        if !full.is_empty() {
            full.push('.');
        }
        full.push_str(o);
    }
    if !full.is_empty() {
        full.push('.');
    }
    full.push_str(msg.name());
    let mut rust = String::from("self::");
    for o in outer {
        rust.push_str(&proto_module(o));
        rust.push_str("::");
    }
    rust.push_str(&proto_type(msg.name()));
    let desc = desc_path.display().to_string();
    let _ = write!(
        code,
        "impl ::shoal::Message for {rust} {{\n\
         \x20   type View<'a> = Self;\n\
         \x20   fn type_info() -> &'static ::shoal::TypeInfo {{\n\
         \x20       static T: ::std::sync::OnceLock<::shoal::TypeInfo> = ::std::sync::OnceLock::new();\n\
         \x20       T.get_or_init(|| ::shoal::TypeInfo::new({full:?}, \"proto\", &include_bytes!({desc:?})[..]))\n\
         \x20   }}\n\
         \x20   fn encode(&self, sink: &mut dyn ::shoal::MessageSink) -> ::std::result::Result<(), ::shoal::EncodeError> {{\n\
         \x20       ::shoal::__codegen::prost_encode(self, sink)\n\
         \x20   }}\n\
         \x20   fn decode(bytes: &[u8]) -> ::std::result::Result<Self, ::shoal::DecodeError> {{\n\
         \x20       ::shoal::__codegen::prost_decode(bytes, {full:?})\n\
         \x20   }}\n\
         \x20   fn view(bytes: &[u8]) -> ::std::result::Result<Self, ::shoal::DecodeError> {{\n\
         \x20       ::shoal::__codegen::prost_decode(bytes, {full:?})\n\
         \x20   }}\n\
         }}\n"
    );
    names.push(full);
    let mut inner: Vec<&str> = outer.to_vec();
    inner.push(msg.name());
    for nested in &msg.nested_type {
        proto_impls(nested, package, &inner, desc_path, code, names);
    }
}

/// Every message of `fds` by its fully qualified protobuf name (`.pkg.Outer.Inner`) → its Rust path from the root
/// of the include file (`pkg::outer::Inner`); the well-known types are prost-types'.
fn message_paths(fds: &FileDescriptorSet) -> HashMap<String, String> {
    fn visit(msg: &DescriptorProto, proto: &str, rust: &str, out: &mut HashMap<String, String>) {
        let full = format!("{proto}.{}", msg.name());
        let path = if rust.is_empty() { proto_type(msg.name()) } else { format!("{rust}::{}", proto_type(msg.name())) };
        out.insert(full.clone(), path);
        let inner =
            if rust.is_empty() { proto_module(msg.name()) } else { format!("{rust}::{}", proto_module(msg.name())) };
        for n in &msg.nested_type {
            visit(n, &full, &inner, out);
        }
    }
    let mut out = HashMap::new();
    for f in &fds.file {
        let package = f.package();
        let proto = if package.is_empty() { String::new() } else { format!(".{package}") };
        if package == "google.protobuf" {
            for m in &f.message_type {
                out.insert(
                    format!(".google.protobuf.{}", m.name()),
                    format!("::prost_types::{}", proto_type(m.name())),
                );
            }
            continue;
        }
        let rust = package.split('.').filter(|s| !s.is_empty()).map(proto_module).collect::<Vec<_>>().join("::");
        for m in &f.message_type {
            visit(m, &proto, &rust, &mut out);
        }
    }
    out
}

/// For a `service` of a `.proto` (in the module of its package, `depth` levels below the include's root): a server
/// trait with one method per RPC (typed request → typed response) and `serve`, and a typed client, as tonic
/// generates them for gRPC. The service is named as eCAL's protobuf `CServiceServer` names it, by its full name
/// (`pkg.Service`); methods by their names in the `.proto`. Streaming RPCs are not supported by eCAL and are skipped.
fn service_code(
    svc: &prost_types::ServiceDescriptorProto,
    package: &str,
    depth: usize,
    paths: &HashMap<String, String>,
    code: &mut String,
) {
    let name = svc.name();
    let full = if package.is_empty() { name.to_string() } else { format!("{package}.{name}") };
    let up = "super::".repeat(depth);
    let ty = |t: &str| -> Option<String> {
        let p = paths.get(t)?;
        Some(if p.starts_with("::") { p.clone() } else { format!("self::{up}{p}") })
    };
    let methods: Vec<(String, String, String, String)> = svc
        .method
        .iter()
        .filter(|m| !m.client_streaming() && !m.server_streaming())
        .filter_map(|m| {
            Some((m.name().to_string(), sanitize(m.name().to_snake_case()), ty(m.input_type())?, ty(m.output_type())?))
        })
        .collect();
    let server = format!("{}Server", proto_type(name));
    let client = format!("{}Client", proto_type(name));
    let _ = writeln!(
        code,
        "/// The server side of service `{full}`: implement one method per RPC, then [`{server}::serve`].
         pub trait {server}: ::std::marker::Send + ::std::marker::Sync + 'static {{"
    );
    for (rpc, f, req, resp) in &methods {
        let _ = writeln!(
            code,
            "    /// RPC `{rpc}`.
                 fn {f}(&self, request: {req}) -> ::std::result::Result<{resp}, ::shoal::service::HandlerError>;"
        );
    }
    let _ = writeln!(
        code,
        "    /// Offers every RPC as a method of the service `{full}` (its name in eCAL), announced with the
             /// request's and response's type information.
             fn serve(self, node: &::shoal::Node) -> ::std::result::Result<::shoal::ServiceServer, ::shoal::error::ServiceBuildError>
             where
                 Self: Sized,
             {{
                 self.serve_as(node, {full:?})
             }}
             /// As [`serve`](Self::serve), under another service name.
             fn serve_as(self, node: &::shoal::Node, service_name: &str) -> ::std::result::Result<::shoal::ServiceServer, ::shoal::error::ServiceBuildError>
             where
                 Self: Sized,
             {{
                 let this = ::std::sync::Arc::new(self);
                 let builder = node.service_server(service_name);"
    );
    for (rpc, f, req, resp) in &methods {
        let _ = writeln!(
            code,
            "        let s = ::std::sync::Arc::clone(&this);
                     let builder = builder.method({rpc:?}, <{req} as ::shoal::Message>::type_info().clone(), <{resp} as ::shoal::Message>::type_info().clone(), move |bytes: &[u8]| {{
                         let request = <{req} as ::shoal::Message>::decode(bytes)?;
                         Ok(::prost::Message::encode_to_vec(&s.{f}(request)?))
                     }});"
        );
    }
    let _ = writeln!(
        code,
        "        builder.build()
             }}
         }}
         /// A typed client of service `{full}`: one method per RPC, returning one response per server.
         #[derive(Debug)]
         pub struct {client} {{
             inner: ::shoal::ServiceClient,
         }}
         impl {client} {{
             /// The service's name in eCAL.
             pub const SERVICE_NAME: &'static str = {full:?};
             /// A client of `{full}`.
             pub fn new(node: &::shoal::Node) -> Self {{
                 Self::with_name(node, Self::SERVICE_NAME)
             }}
             /// A client of the service under another name.
             pub fn with_name(node: &::shoal::Node, service_name: &str) -> Self {{
                 let builder = node.service_client(service_name);"
    );
    for (rpc, _, req, resp) in &methods {
        let _ = writeln!(
            code,
            "        let builder = builder.method({rpc:?}, <{req} as ::shoal::Message>::type_info().clone(), <{resp} as ::shoal::Message>::type_info().clone());"
        );
    }
    let _ = writeln!(
        code,
        "        {client} {{ inner: builder.build() }}
             }}
             /// The untyped client (servers, waiting, calling one server).
             pub fn client(&self) -> &::shoal::ServiceClient {{
                 &self.inner
             }}"
    );
    for (rpc, f, req, resp) in &methods {
        let _ = writeln!(
            code,
            "    /// Calls RPC `{rpc}` on every server; one response per server.
                 pub fn {f}(&self, request: &{req}, timeout: ::std::time::Duration) -> ::std::result::Result<::std::vec::Vec<::shoal::service::TypedResponse<{resp}>>, ::shoal::error::CallError> {{
                     let bytes = ::prost::Message::encode_to_vec(request);
                     Ok(self.inner.call({rpc:?}, &bytes, timeout)?.into_iter().map(::shoal::ServiceResponse::into_typed).collect())
                 }}"
        );
    }
    code.push_str(
        "}
",
    );
}

/// The descriptor eCAL 6.1.1 announces for a message of `file`: a `FileDescriptorSet` of the file and everything
/// it imports, transitively, each once, dependencies before dependents (depth first in import order), as
/// `ecal.msg.proto`'s `get_descriptor_from_type` builds it. Each file as protoc embeds it in Python code (what
/// that helper copies): with `json_name`, without source info. Byte-identical to the helper's output for
/// `google/protobuf/timestamp.proto` (checked against protobuf 6.33.6's `timestamp_pb2`).
pub fn ecal_descriptor_set(file: &str, files: &HashMap<&str, &FileDescriptorProto>) -> FileDescriptorSet {
    fn visit(
        name: &str,
        files: &HashMap<&str, &FileDescriptorProto>,
        seen: &mut HashSet<String>,
        out: &mut Vec<FileDescriptorProto>,
    ) {
        if !seen.insert(name.to_string()) {
            return;
        }
        let Some(f) = files.get(name) else { return };
        for dep in &f.dependency {
            visit(dep, files, seen, out);
        }
        let mut f = (*f).clone();
        f.source_code_info = None;
        out.push(f);
    }
    let mut out = Vec::new();
    visit(file, files, &mut HashSet::new(), &mut out);
    FileDescriptorSet { file: out }
}

/// The module tree of the protobuf include file: one module per package segment.
#[derive(Default)]
struct ModTree {
    includes: Vec<PathBuf>,
    code: String,
    children: BTreeMap<String, ModTree>,
}

impl ModTree {
    fn node(&mut self, path: impl Iterator<Item = String>) -> &mut ModTree {
        let mut n = self;
        for p in path {
            n = n.children.entry(p).or_default();
        }
        n
    }

    fn render(&self, out: &mut String) {
        for inc in &self.includes {
            let _ = writeln!(out, "include!({:?});", inc.display().to_string());
        }
        out.push_str(&self.code);
        for (name, child) in &self.children {
            let _ = writeln!(
                out,
                "#[allow(dead_code, clippy::all, missing_docs, missing_debug_implementations, unreachable_pub)]\npub mod {name} {{"
            );
            child.render(out);
            out.push_str("}\n");
        }
    }
}
