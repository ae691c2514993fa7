//! Derives the record's fields from their one declaration, `memlane.schema.Row`
//! (`python/memlane/schema.py`): `ROW_FIELDS`, in order, for `Engine.prepare`,
//! which reads a row's values by position. A field the engine reads that
//! `Row` no longer has fails the build (`engine.rs`, `field`).

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let schema = Path::new(&manifest).join("../../python/memlane/schema.py");
    println!("cargo:rerun-if-changed={}", schema.display());
    let source = std::fs::read_to_string(&schema)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", schema.display()));
    let fields = row_fields(&source);
    assert!(
        !fields.is_empty(),
        "no `class Row(NamedTuple):` fields in schema.py"
    );
    let mut out = format!("pub const ROW_FIELDS: [&str; {}] = [\n", fields.len());
    for f in &fields {
        writeln!(out, "    {f:?},").expect("writing to a String");
    }
    out.push_str("];\n");
    let dest =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("row_fields.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}

/// The names of `Row`'s fields: the `name: type` lines of its body, which
/// ends at the first line indented less than it.
fn row_fields(source: &str) -> Vec<String> {
    let mut lines = source
        .lines()
        .skip_while(|l| !l.starts_with("class Row(NamedTuple):"));
    lines.next();
    let mut fields = Vec::new();
    for line in lines {
        if !line.is_empty() && !line.starts_with("    ") {
            break;
        }
        let Some((name, _)) = line.strip_prefix("    ").and_then(|l| l.split_once(": ")) else {
            continue;
        };
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            fields.push(name.to_owned());
        }
    }
    fields
}
