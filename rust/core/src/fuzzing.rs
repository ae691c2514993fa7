//! The entry points of the fuzz targets (`fuzz/` at the repository root, run
//! by `benches/fuzz.sh`). Each takes arbitrary bytes and must return: an
//! error is a correct answer to bad input, a panic is a bug. What a loader
//! accepts is then used (searched, added to, removed from), since a damaged
//! file that loads must still give an index that cannot read out of bounds.
//!
//! Not part of the API: hidden from the docs and free to change.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::bm25::{Analyzer, AnalyzerConfig, Language, Stopwords};
use crate::engine::{flatten_metadata, Attrs, Engine, EngineConfig, Mode, SearchRequest};
use crate::hnsw::Hnsw;
use crate::{bm25, engine, hnsw, persist};

/// Dimensions above this are not searched (the harness would allocate the query).
const MAX_DIM: usize = 1 << 14;

/// An HNSW snapshot's payload (what follows the checksummed header), read
/// as every format version the loader takes.
pub fn hnsw_snapshot(payload: &[u8]) -> bool {
    let mut accepted = false;
    for version in 1..=hnsw::snapshot::VERSION {
        if let Ok(mut h) = hnsw::snapshot::decode(payload, version) {
            use_hnsw(&mut h);
            accepted = true;
        }
    }
    accepted
}

fn use_hnsw(h: &mut Hnsw) {
    let dim = h.dim();
    if dim == 0 || dim > MAX_DIM {
        return;
    }
    let q: Vec<f32> = (0..dim).map(|i| ((i + 1) as f32).sin()).collect();
    let _ = h.search(&q, 5, None, None);
    // The vectors an engine's snapshot left out, given back as copies of the
    // query (the first 64: searches refuse to run while others are missing).
    let awaiting = h.awaiting();
    let some = &awaiting[..awaiting.len().min(64)];
    let _ = h.fill(some, &q.repeat(some.len()));
    let _ = h.search(&q, 5, None, None);
    let ids = h.ids();
    for &id in ids.iter().take(3) {
        let _ = h.vector(id);
    }
    let _ = h.add(&[u64::MAX - 7], &q);
    if let Some(&id) = ids.first() {
        let _ = h.remove(&[id]);
    }
    let _ = h.search(&q, 5, None, None);
}

/// A BM25 snapshot's payload.
pub fn bm25_snapshot(payload: &[u8]) -> bool {
    let accepted = bm25::snapshot::decode(payload);
    if let Ok(mut index) = accepted {
        let _ = index.search("the quick brown fox jumps", 5, None);
        let ids = index.ids();
        let _ = index.add(&[u64::MAX - 7], &["a quick new document"]);
        if let Some(&id) = ids.first() {
            let _ = index.remove(&[id]);
        }
        let _ = index.search("quick document", 5, None);
        index.compact();
        let _ = index.search("quick", 5, None);
        return true;
    }
    false
}

/// An engine snapshot directory, from three length-prefixed payloads
/// (`records.bin`, `bm25.bin`, then the rest is `hnsw.bin`): each is framed
/// with a valid header, written under a scratch directory, and loaded by
/// [`Engine::load`] as a store would at open. The stamps of the siblings in
/// the records' head are set to those of the files written, as a save sets
/// them: else no input would get past them to the records' decoding.
pub fn engine_snapshot(data: &[u8]) -> bool {
    let mut rest = data;
    let mut part = || -> &[u8] {
        let n = rest
            .get(..4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let body = rest.get(4..).unwrap_or(&[]);
        let n = n.min(body.len());
        let (head, tail) = body.split_at(n);
        rest = tail;
        head
    };
    let (records, bm25_payload) = (part(), part());
    let hnsw_payload = rest;
    // The directory is named for the seq the records claim, as a real one is.
    let seq = records
        .get(..8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let root = scratch();
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join(format!("snapshot-{seq:020}"));
    if std::fs::create_dir_all(&dir).is_err() {
        return false;
    }
    let siblings = [
        (
            "bm25.bin",
            bm25::snapshot::KIND,
            bm25::snapshot::VERSION,
            bm25_payload,
        ),
        (
            "hnsw.bin",
            hnsw::snapshot::KIND,
            hnsw::snapshot::VERSION,
            hnsw_payload,
        ),
    ];
    // After `seq`, `dim` and the history: bm25.bin's stamp, then hnsw.bin's
    // where `dim` is not 0 (16 bytes each).
    let mut records = records.to_vec();
    let has_graph = records
        .get(8..16)
        .is_some_and(|d| d.iter().any(|&b| b != 0));
    for (i, (name, kind, version, payload)) in siblings.into_iter().enumerate() {
        let mut bytes = persist::header(kind, version, payload);
        bytes.extend_from_slice(payload);
        if std::fs::write(dir.join(name), &bytes).is_err() {
            return false;
        }
        if i == 0 || has_graph {
            let mut stamp = version.to_le_bytes().to_vec();
            stamp.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            stamp.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
            if let Some(at) = records.get_mut(24 + 16 * i..40 + 16 * i) {
                at.copy_from_slice(&stamp);
            }
        }
    }
    let mut bytes = persist::header(engine::snapshot::KIND, engine::snapshot::VERSION, &records);
    bytes.extend_from_slice(&records);
    if std::fs::write(dir.join("records.bin"), bytes).is_err() {
        return false;
    }
    let loaded = Engine::load(&root);
    let accepted = loaded.is_ok();
    if let Ok((mut e, ..)) = loaded {
        use_engine(&mut e);
    }
    let _ = std::fs::remove_dir_all(&root);
    accepted
}

fn scratch() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| std::env::temp_dir().join(format!("memlane-fuzz-{}", std::process::id())))
        .clone()
}

fn request<'a>(
    text: &'a str,
    vector: Option<&'a [f32]>,
    filter: Option<&'a engine::Filter>,
) -> SearchRequest<'a> {
    let mode = if vector.is_some() {
        Mode::Hybrid
    } else {
        Mode::Text
    };
    SearchRequest {
        filter,
        candidates: 20,
        turn_candidates: 20,
        rate: 0.01,
        age_from: crate::scoring::AgeFrom::Clock,
        now: 1.0e9,
        explain: true,
        touch: true,
        ..SearchRequest::new(Some(text), vector, mode, 5)
    }
}

fn use_engine(e: &mut Engine) {
    let q: Option<Vec<f32>> = e
        .dim()
        .filter(|&d| d <= MAX_DIM)
        .map(|d| (0..d).map(|i| ((i + 1) as f32).cos()).collect());
    let _ = e.search(&request("quick brown fox", q.as_deref(), None));
    if let Some(q) = &q {
        let awaiting = e.awaiting();
        let some = &awaiting[..awaiting.len().min(64)];
        let _ = e.fill(some, &q.repeat(some.len()));
    }
    for json in [
        r#"{"table": "memories"}"#,
        r#"{"agent_id": {"$in": ["a", "b"]}}"#,
        r#"{"n": {"$gt": 1}}"#,
    ] {
        if let Ok(f) = e.parse_filter(json) {
            let _ = e.count(Some(&f));
            let _ = e.search(&request("quick", q.as_deref(), Some(&f)));
        }
    }
    let _ = e.index_pending(16);
    let ids = e.ids();
    if let Some(&id) = ids.first() {
        let _ = e.remove(&[id], true);
    }
    let _ = e.search(&request("brown", q.as_deref(), None));
}

/// Text through an analyzer whose configuration the first byte picks.
pub fn analyzer(data: &[u8]) -> bool {
    let Some((&pick, text)) = data.split_first() else {
        return false;
    };
    let language = Language::ALL[usize::from(pick) % Language::ALL.len()];
    let stopwords = match (pick >> 5) & 3 {
        0 => Stopwords::None,
        1 => Stopwords::Language,
        _ => Stopwords::Custom(vec!["the".into(), "É".into(), String::new()]),
    };
    let a = Analyzer::new(AnalyzerConfig {
        language,
        stopwords,
        stemming: pick & 0x40 != 0,
        fold_accents: pick & 0x80 != 0,
    });
    let text = String::from_utf8_lossy(text);
    let _ = a.analyze(&text);
    true
}

/// A filter (JSON text) parsed against a small engine, then used.
pub fn filter(data: &[u8]) -> bool {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    let e = ENGINE.get_or_init(small_engine);
    let json = String::from_utf8_lossy(data);
    if let Ok(f) = e.parse_filter(&json) {
        let _ = e.count(Some(&f));
        let _ = e.select(&f);
        let _ = e.ids_where(Some(&f), engine::Order::CreatedDesc, 1, 3);
        let _ = e.search(&request("dark", None, Some(&f)));
        return true;
    }
    false
}

fn small_engine() -> Engine {
    let mut e = Engine::new(EngineConfig {
        dim: Some(2),
        ..EngineConfig::default()
    })
    .expect("a valid configuration");
    let texts: Vec<String> = ["dark mode", "dark chocolate", "light mode"]
        .map(String::from)
        .to_vec();
    let metas = [
        r#"{"n": 1, "tags": ["a", "b"], "user": {"plan": "pro"}}"#,
        r#"{"n": 2.5, "flag": true, "none": null}"#,
        r#"{"s": "x", "nested": {"deep": {"k": [1, 2]}}}"#,
    ];
    let attrs: Vec<Attrs> = metas
        .iter()
        .enumerate()
        .map(|(i, m)| Attrs {
            id: Some(format!("id-{i}")),
            tbl: if i == 2 { "facts" } else { "memories" }.into(),
            r#type: "semantic".into(),
            scope: [
                Some(["a", "b", "c"][i].into()),
                None,
                None,
                None,
                None,
                None,
            ],
            importance: 0.5,
            evergreen: i == 1,
            created_at: 1.0e9 + i as f64,
            updated_at: 1.0e9,
            last_accessed_at: 1.0e9,
            access_count: i as u64,
            valid_to: (i == 1).then_some(1.0e9 + 5.0),
            expires_at: (i == 2).then_some(1.0e9 + 9.0),
            recorded_at: 1.0e9 + i as f64,
            speaker: None,
            metadata: flatten_metadata(m).expect("valid metadata"),
        })
        .collect();
    e.upsert(engine::Batch {
        ids: &[1, 2, 3],
        texts: Some(&texts),
        vectors: Some(&[1.0, 0.0, 0.6, 0.8, 0.0, 1.0]),
        attrs: &attrs,
    })
    .expect("a valid batch");
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    type Target = fn(&[u8]) -> bool;
    const TARGETS: [(&str, Target); 5] = [
        ("hnsw_snapshot", hnsw_snapshot),
        ("bm25_snapshot", bm25_snapshot),
        ("engine_snapshot", engine_snapshot),
        ("analyzer", analyzer),
        ("filter", filter),
    ];

    /// The harness sets the stamps a save sets: a real snapshot, framed as
    /// its input with its stamps zeroed (as a fuzzer's bytes would not hold
    /// them), loads, so fuzzed inputs reach the records' decoding.
    #[test]
    fn engine_snapshot_takes_a_real_snapshot() {
        let dir = std::env::temp_dir().join(format!("memlane-fuzz-real-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut e = small_engine();
        e.index_pending(2).unwrap();
        e.save(&dir, 3, 9, true).unwrap();
        let snap = dir.join(format!("snapshot-{:020}", 3));
        let payload = |name: &str, kind, version| {
            persist::load(&snap.join(name), kind, version)
                .unwrap()
                .1
                .to_vec()
        };
        let mut records = payload(
            "records.bin",
            engine::snapshot::KIND,
            engine::snapshot::VERSION,
        );
        // After seq, dim and the history: two stamps of 16 bytes.
        records[24..56].fill(0);
        let bm25 = payload("bm25.bin", bm25::snapshot::KIND, bm25::snapshot::VERSION);
        let mut data = Vec::new();
        for part in [&records, &bm25] {
            data.extend_from_slice(&(part.len() as u32).to_le_bytes());
            data.extend_from_slice(part);
        }
        data.extend(payload(
            "hnsw.bin",
            hnsw::snapshot::KIND,
            hnsw::snapshot::VERSION,
        ));
        assert!(engine_snapshot(&data));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Each entry point returns on empty, short and junk input.
    #[test]
    fn entry_points_take_junk() {
        let junk: [&[u8]; 4] = [b"", b"\x00", b"{\"$and\": [{\"n\": 1}]}", &[0xff; 64]];
        for data in junk {
            for (_, target) in TARGETS {
                target(data);
            }
        }
    }

    /// The seeds (`fuzz/seeds/<target>/`, real snapshots made by
    /// `fuzz/make_seeds.py`) are accepted, so the fuzzers start from inputs
    /// that reach past the first checks; the inputs under
    /// `fuzz/regressions/<target>/` (crashes found once) no longer panic.
    #[test]
    fn seeds_load_and_regressions_pass() {
        let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        for (name, target) in TARGETS {
            for (kind, must_accept) in [("seeds", true), ("regressions", false)] {
                let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join(name)) else {
                    assert!(!must_accept, "no seeds for {name}");
                    continue;
                };
                for entry in entries.flatten() {
                    let data = std::fs::read(entry.path()).unwrap();
                    let accepted = target(&data);
                    let file = entry.file_name();
                    let empty = data.len() <= 1;
                    assert!(
                        accepted || !must_accept || empty,
                        "{name}: {file:?} refused"
                    );
                }
            }
        }
    }
}
