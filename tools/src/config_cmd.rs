//! `shoal config show | check FILE | generate`: the configuration every shoal process on this machine would
//! load (and where each value came from), a file's errors, and the documented default file.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use shoal::Config;
use shoal::config::{ConfigReport, FoundBy, SearchPaths, ValueOrigin};

use crate::common::{Table, json_line};
use crate::exit;

/// `shoal config ...`
#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// The effective configuration (the file shoal would read: $ECAL_INI, ./ecal.ini, ~/.ecal/ecal.ini,
    /// /etc/ecal/ecal.ini) with the origin of every value: default, or file:line.
    Show(ShowArgs),
    /// Check a file: every error with file:line and what is allowed (exit code 4), and the warnings.
    Check(CheckArgs),
    /// Print the documented default file (every key, its meaning, default and allowed values; `etc/ecal.ini`).
    Generate,
}

/// Arguments of `shoal config show`.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// One JSON object per key, after one describing the file.
    #[arg(long)]
    json: bool,
}

/// Arguments of `shoal config check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The file to check.
    file: PathBuf,
    /// One JSON object per error or warning, then a summary object.
    #[arg(long)]
    json: bool,
}

/// Runs a `shoal config` command.
pub(crate) fn run(cmd: &ConfigCommand) -> Result<()> {
    match cmd {
        ConfigCommand::Show(a) => show(a),
        ConfigCommand::Check(a) => check(a),
        ConfigCommand::Generate => {
            std::io::stdout().lock().write_all(Config::default_ini_text().as_bytes()).context("writing to stdout")
        }
    }
}

fn origin_text(o: &ValueOrigin) -> String {
    match o {
        ValueOrigin::Default => "default".into(),
        ValueOrigin::File { path, line } => format!("{}:{line}", path.display()),
    }
}

fn file_json(r: &ConfigReport, search: &SearchPaths) -> Value {
    let searched: Vec<String> = match &search.ecal_ini {
        Some(p) => vec![p.display().to_string()],
        None => search.candidates.iter().map(|p| p.display().to_string()).collect(),
    };
    let (file, found_by) = match &r.file {
        Some((p, by)) => (
            Some(p.display().to_string()),
            Some(match by {
                FoundBy::EcalIni => "environment ($ECAL_INI)",
                FoundBy::Search => "search",
                FoundBy::Explicit => "explicit",
            }),
        ),
        None => (None, None),
    };
    json!({"kind": "file", "file": file, "found_by": found_by, "searched": searched})
}

fn show(a: &ShowArgs) -> Result<()> {
    let search = SearchPaths::from_env();
    let report = Config::explain_from(&search).map_err(|e| {
        exit::coded(exit::CONFIG, format!("{e} (`shoal config check FILE` lists every error in the file)"))
    })?;
    let mut out = std::io::stdout().lock();
    if a.json {
        json_line(&mut out, &file_json(&report, &search))?;
        for k in &report.keys {
            let (file, line) = match &k.origin {
                ValueOrigin::Default => (None, None),
                ValueOrigin::File { path, line } => (Some(path.display().to_string()), Some(*line)),
            };
            json_line(
                &mut out,
                &json!({"kind": "key", "section": k.section, "key": k.key, "value": k.value,
                        "default": k.default, "allowed": k.allowed,
                        "origin": if file.is_some() { "file" } else { "default" }, "file": file, "line": line}),
            )?;
        }
        for w in &report.warnings {
            json_line(
                &mut out,
                &json!({"kind": "warning", "file": w.path.display().to_string(), "line": w.line,
                                        "message": w.message}),
            )?;
        }
        return Ok(());
    }
    match &report.file {
        Some((p, FoundBy::EcalIni)) => writeln!(out, "file: {} (named by $ECAL_INI)", p.display())?,
        Some((p, _)) => writeln!(
            out,
            "file: {} (the first that exists of {}; $ECAL_INI is not set)",
            p.display(),
            search.candidates.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
        )?,
        None => writeln!(
            out,
            "file: none ($ECAL_INI is not set and none of {} exists): every value is the built-in default",
            search.candidates.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
        )?,
    }
    writeln!(out)?;
    let mut t = Table::new(&["SECTION", "KEY", "VALUE", "ORIGIN"]);
    for k in &report.keys {
        let value = if k.value.is_empty() { "(empty)".to_owned() } else { k.value.clone() };
        t.row(vec![k.section.into(), k.key.into(), value, origin_text(&k.origin)]);
    }
    t.write(&mut out)?;
    if !report.warnings.is_empty() {
        writeln!(out, "\nwarnings:")?;
        for w in &report.warnings {
            writeln!(out, "  {w}")?;
        }
    }
    Ok(())
}

fn check(a: &CheckArgs) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match Config::check_file(&a.file) {
        Ok(report) => {
            let set = report.keys.iter().filter(|k| k.origin != ValueOrigin::Default).count();
            if a.json {
                for w in &report.warnings {
                    json_line(
                        &mut out,
                        &json!({"kind": "warning", "file": w.path.display().to_string(),
                                                "line": w.line, "message": w.message}),
                    )?;
                }
                json_line(
                    &mut out,
                    &json!({"kind": "summary", "file": a.file.display().to_string(), "ok": true,
                                            "errors": 0, "warnings": report.warnings.len(), "keys_set": set}),
                )?;
            } else {
                for w in &report.warnings {
                    writeln!(out, "warning: {w}")?;
                }
                writeln!(
                    out,
                    "{}: ok ({set} key(s) set, {} warning(s); `shoal config show` with ECAL_INI={} shows every value)",
                    a.file.display(),
                    report.warnings.len(),
                    a.file.display()
                )?;
            }
            Ok(())
        }
        Err(errors) => {
            if a.json {
                for e in &errors {
                    json_line(&mut out, &error_json(e))?;
                }
                json_line(
                    &mut out,
                    &json!({"kind": "summary", "file": a.file.display().to_string(), "ok": false,
                                            "errors": errors.len()}),
                )?;
            } else {
                for e in &errors {
                    eprintln!("error: {e}");
                }
            }
            let more = if errors.len() >= 100 { " (stopped at 100)" } else { "" };
            Err(exit::coded(exit::CONFIG, format!("{}: {} error(s){more}", a.file.display(), errors.len())))
        }
    }
}

fn error_json(e: &shoal::config::ConfigError) -> Value {
    use shoal::config::ConfigError as E;
    let mut v = json!({"kind": "error", "message": e.to_string()});
    match e {
        E::Value { line, section, key, value, allowed, .. } => {
            v["line"] = json!(line);
            v["section"] = json!(section);
            v["key"] = json!(key);
            v["value"] = json!(value);
            v["allowed"] = json!(allowed);
        }
        E::Syntax { line, .. } | E::Conflict { line, .. } => v["line"] = json!(line),
        E::Duplicate { line, first_line, section, key, .. } => {
            v["line"] = json!(line);
            v["first_line"] = json!(first_line);
            v["section"] = json!(section);
            v["key"] = json!(key);
        }
        _ => {}
    }
    v
}
