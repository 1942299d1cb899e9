//! Validates JSON-lines events against docs/schema/events-v1.schema.json with scripts/validate-events.py.
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// python3-jsonschema is there; without it the caller skips loudly (a failure under CI=true).
pub fn validator_available(test: &str) -> bool {
    let ok = Command::new("python3").args(["-c", "import jsonschema"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        let msg = format!("SKIPPED {test}: python3-jsonschema is not installed (scripts/install-deps.sh installs it)");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}; under CI=true a skip is a failure");
        eprintln!("{msg}");
    }
    ok
}

/// Ok(summary) when every line of `file` is valid; Err(the validator's messages) otherwise.
pub fn validate(file: &Path) -> Result<String, String> {
    let out = Command::new("python3")
        .arg(repo().join("scripts/validate-events.py"))
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run the validator: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    match out.status.code() {
        Some(0) => Ok(text),
        _ => Err(text),
    }
}

/// Validates `lines` (JSON values) written to a temporary file named after `tag`.
pub fn validate_values(tag: &str, lines: &[serde_json::Value]) -> Result<String, String> {
    let p = std::env::temp_dir().join(format!("tv-schema-{tag}-{}.jsonl", std::process::id()));
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(&p, text).map_err(|e| e.to_string())?;
    let r = validate(&p);
    let _ = std::fs::remove_file(&p);
    r
}
