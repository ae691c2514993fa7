use super::*;
use crate::fusion::Fusion;
use crate::persist;
use crate::scoring::Weights;

const HOUR: f64 = 3600.0;

fn attrs(agent: &str, importance: f32, accessed: f64, evergreen: bool) -> Attrs {
    Attrs {
        id: Some(format!("{agent}-{importance}")),
        scope: [Some(agent.into()), None, None, None, None, None],
        importance,
        evergreen,
        created_at: accessed,
        updated_at: accessed,
        last_accessed_at: accessed,
        metadata: flatten_metadata(&format!(r#"{{"agent": "{agent}"}}"#)).unwrap(),
        ..Attrs::blank("memories", "semantic")
    }
}

fn engine(dim: Option<usize>) -> Engine {
    Engine::new(EngineConfig {
        dim,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn request<'a>(text: Option<&'a str>, vector: Option<&'a [f32]>, mode: Mode) -> SearchRequest<'a> {
    SearchRequest {
        weights: Weights::resolve(Some(1.0), None, None).unwrap(),
        now: 100.0 * HOUR,
        explain: true,
        ..SearchRequest::new(text, vector, mode, 10)
    }
}

/// Three records in 2-d: texts and unit vectors chosen so both retrievers
/// have a clear order.
fn three() -> Engine {
    let mut e = engine(Some(2));
    let texts: Vec<String> = [
        "dark mode theme",
        "dark chocolate cake",
        "light mode setting",
    ]
    .map(String::from)
    .into();
    let vectors = [1.0, 0.0, 0.6, 0.8, 0.0, 1.0];
    let a = [
        attrs("a", 0.5, 100.0 * HOUR, false),
        attrs("a", 0.9, 90.0 * HOUR, false),
        attrs("b", 0.1, 0.0, true),
    ];
    e.upsert(Batch {
        ids: &[1, 2, 3],
        texts: Some(&texts),
        vectors: Some(&vectors),
        attrs: &a,
    })
    .unwrap();
    e
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn hybrid_rrf_by_hand() {
    let e = three();
    // "dark mode": BM25 ranks 1 (both terms) then 2 or 3 (one term each).
    let q = [1.0, 0.0];
    let mut r = request(Some("dark mode"), Some(&q), Mode::Hybrid);
    r.fusion = Fusion::rrf(60.0).unwrap();
    let hits = e.search(&r).unwrap();
    assert_eq!(hits.ids[0], 1);
    let s = hits.signals[0];
    assert_eq!((s.bm25_rank, s.vector_rank), (Some(1), Some(1)));
    assert!(close(s.relevance, 1.0));
    assert!(close(s.cosine.unwrap() as f64, 1.0));
    // Record 2: cosine 0.6 (vector rank 2), BM25 rank 2 or 3.
    let i = hits.ids.iter().position(|&id| id == 2).unwrap();
    let s = hits.signals[i];
    assert_eq!(s.vector_rank, Some(2));
    let expected = (1.0 / (60.0 + s.bm25_rank.unwrap() as f64) + 1.0 / 62.0) / (2.0 / 61.0);
    assert!(close(s.relevance, expected));
    assert!(close(s.cosine.unwrap() as f64, 0.6));
}

#[test]
fn versions_are_the_update_and_expiry_times_held() {
    let mut e = three();
    let a = [Attrs {
        updated_at: 123.0 * HOUR,
        ..attrs("a", 0.5, 100.0 * HOUR, false)
    }];
    e.upsert(Batch {
        ids: &[2],
        texts: Some(&["dark chocolate tart".to_string()]),
        vectors: Some(&[0.6, 0.8]),
        attrs: &a,
    })
    .unwrap();
    let v = e.versions(&[1, 2, 3, 99]);
    let updated: Vec<f64> = v.iter().map(|p| p.0).collect();
    assert_eq!(updated[..3], [100.0 * HOUR, 123.0 * HOUR, 0.0]);
    assert!(v[..3].iter().all(|p| p.1 == f64::INFINITY));
    assert!(v[3].0.is_nan() && v[3].1.is_nan());
}

#[test]
fn modes_and_weighted_fusion() {
    let e = three();
    let q = [0.0, 1.0];
    let v = e
        .search(&request(Some("dark"), Some(&q), Mode::Vector))
        .unwrap();
    assert_eq!(v.ids, vec![3, 2, 1]);
    assert!(close(v.signals[1].relevance, 0.8));
    assert!(close(v.signals[2].relevance, 0.0));
    // Explain fills the BM25 of vector-only hits: "dark" is in 1 and 2.
    assert_eq!(v.signals[2].bm25_rank, None);
    assert!(v.signals[2].bm25.unwrap() > 0.0);
    assert_eq!(v.signals[0].bm25, Some(0.0));

    // Text relevance is BM25 over the query's ceiling: below 1 even for the best hit.
    let t = e.search(&request(Some("dark"), None, Mode::Text)).unwrap();
    assert_eq!(t.ids.len(), 2);
    let ceiling = e.bm25.ceiling("dark");
    for s in &t.signals {
        assert!(close(s.relevance, f64::from(s.bm25.unwrap()) / ceiling));
        assert!(s.relevance > 0.0 && s.relevance < 1.0);
    }

    let mut r = request(Some("dark"), Some(&q), Mode::Hybrid);
    r.fusion = Fusion::weighted(0.25).unwrap();
    let w = e.search(&r).unwrap();
    for (id, s) in w.ids.iter().zip(&w.signals) {
        let expected =
            0.25 * (s.cosine.unwrap() as f64).max(0.0) + 0.75 * s.bm25.unwrap() as f64 / ceiling;
        assert!(close(s.relevance, expected), "id {id}");
    }
}

/// The default fusion weighs each query by its two lists' spreads over every
/// candidate: here three, so each spread is the best minus the last.
#[test]
fn adaptive_fusion_weighs_by_the_lists_spreads() {
    let e = three();
    let q = [0.0, 1.0];
    let r = request(Some("dark"), Some(&q), Mode::Hybrid);
    assert_eq!(r.fusion, Fusion::Adaptive);
    let hits = e.search(&r).unwrap();
    assert_eq!(hits.ids.len(), 3);
    let ceiling = e.bm25.ceiling("dark");
    let cos: Vec<f64> = hits
        .signals
        .iter()
        .map(|s| f64::from(s.cosine.unwrap()).max(0.0))
        .collect();
    let bm: Vec<f64> = hits
        .signals
        .iter()
        .map(|s| f64::from(s.bm25.unwrap()) / ceiling)
        .collect();
    let spread = |x: &[f64]| {
        x.iter().copied().fold(f64::MIN, f64::max) - x.iter().copied().fold(f64::MAX, f64::min)
    };
    let alpha = crate::fusion::adaptive_alpha(spread(&cos), spread(&bm));
    assert!(alpha > crate::fusion::ADAPTIVE_LOW && alpha < crate::fusion::ADAPTIVE_HIGH);
    for ((s, c), b) in hits.signals.iter().zip(&cos).zip(&bm) {
        assert!(close(s.relevance, alpha * c + (1.0 - alpha) * b));
    }
    // A fixed weight is used as given.
    let mut fixed = r;
    fixed.fusion = Fusion::weighted(alpha).unwrap();
    assert_eq!(e.search(&fixed).unwrap().scores, hits.scores);
}

#[test]
fn recency_and_boost_by_hand() {
    let e = three();
    let q = [1.0, 0.0];
    let mut r = request(None, Some(&q), Mode::Vector);
    r.rate = 0.01;
    r.weights = Weights::resolve(Some(0.5), Some(0.3), Some(0.2)).unwrap();
    let hits = e.search(&r).unwrap();
    let by_id = |id: u64| hits.signals[hits.ids.iter().position(|&x| x == id).unwrap()];
    // Ages count from the newest candidate, record 1 (accessed at 100 h), not from `now`.
    let s = by_id(1);
    assert!(close(s.age_hours, 0.0) && close(s.recency, 1.0));
    assert!(close(s.score, 1.0 * (0.5 + 0.3 * 0.5 + 0.2)));
    // Record 2: 10 hours older than record 1, cosine 0.6, importance 0.9.
    let s = by_id(2);
    let recency = (-0.01f64 * 10.0).exp();
    assert!(close(s.age_hours, 10.0) && close(s.recency, recency));
    let boost = 0.5 + 0.3 * 0.9 + 0.2 * recency;
    assert!(close(s.boost, boost) && close(s.score, 0.6 * boost));
    // Record 3 is evergreen: full recency at 100 hours; cosine 0, so score 0.
    let s = by_id(3);
    assert!(close(s.age_hours, 100.0) && close(s.recency, 1.0));
    assert!(close(s.boost, 0.5 + 0.3 * 0.1 + 0.2) && close(s.score, 0.0));
    // The rate from a half-life: record 2 is 10 of 168 hours old.
    r.rate = crate::scoring::rate(None, 168.0).unwrap();
    let hits = e.search(&r).unwrap();
    let s = hits.signals[hits.ids.iter().position(|&x| x == 2).unwrap()];
    assert!(close(s.recency, 0.5f64.powf(10.0 / 168.0)));
    // Hits come best first, and no score exceeds its relevance.
    assert!(hits.scores.windows(2).all(|w| w[0] >= w[1]));
    assert!(hits.signals.iter().all(|s| s.score <= s.relevance + 1e-12));
    // An explicit rate counts ages to `now` (100 h after record 1's last access).
    r.rate = 0.01;
    r.age_from = crate::scoring::AgeFrom::Clock;
    r.now = 200.0 * HOUR;
    let hits = e.search(&r).unwrap();
    let by_id = |id: u64| hits.signals[hits.ids.iter().position(|&x| x == id).unwrap()];
    let s = by_id(1);
    assert!(close(s.age_hours, 100.0) && close(s.recency, (-0.01f64 * 100.0).exp()));
    assert!(close(by_id(2).age_hours, 110.0));
    assert!(close(by_id(3).recency, 1.0)); // evergreen: exempt
}

#[test]
fn filters_thresholds_and_touch() {
    let e = three();
    let q = [1.0, 0.0];
    let f = e.parse_filter(r#"{"agent_id": "a"}"#).unwrap();
    let mut r = request(Some("mode"), Some(&q), Mode::Hybrid);
    r.filter = Some(&f);
    let hits = e.search(&r).unwrap();
    assert!(!hits.ids.is_empty() && hits.ids.iter().all(|&id| id == 1 || id == 2));

    let mut r = request(None, Some(&q), Mode::Vector);
    r.min_similarity = Some(0.5);
    assert_eq!(e.search(&r).unwrap().ids, vec![1, 2]);
    r.min_similarity = None;
    r.threshold = Some(0.7);
    assert_eq!(e.search(&r).unwrap().ids, vec![1]);

    let nothing = e.parse_filter(r#"{"agent_id": "zz"}"#).unwrap();
    r.threshold = None;
    r.filter = Some(&nothing);
    assert!(e.search(&r).unwrap().ids.is_empty());

    r.filter = None;
    r.touch = true;
    r.k = 1;
    e.search(&r).unwrap();
    let slot = e.records.slot(1).unwrap();
    assert_eq!(e.records.accessed_at(slot), r.now);
    assert_eq!(e.records.access_count(slot), 1);
    e.touch(&[1, 3, 99], r.now + 1.0);
    let f = e.parse_filter(r#"{"access_count": {"$gte": 1}}"#).unwrap();
    assert_eq!(e.ids_where(Some(&f), Order::CreatedAsc, 0, 10), vec![3, 1]);
    let f = e.parse_filter(r#"{"access_count": 2}"#).unwrap();
    assert_eq!(e.ids_where(Some(&f), Order::CreatedAsc, 0, 10), vec![1]);
}

#[test]
fn parked_vectors_are_found_before_and_after_linking() {
    let mut e = three();
    assert_eq!(e.pending(), 3);
    let q = [0.0, 1.0];
    let before = e.search(&request(None, Some(&q), Mode::Vector)).unwrap();
    assert_eq!(e.index_pending(2).unwrap(), 1);
    let middle = e.search(&request(None, Some(&q), Mode::Vector)).unwrap();
    assert_eq!(e.index_pending(100).unwrap(), 0);
    let after = e.search(&request(None, Some(&q), Mode::Vector)).unwrap();
    assert_eq!(before.ids, after.ids);
    assert_eq!(middle.ids, after.ids);
    // Replacing a linked vector parks the new one and unlinks the old.
    let a = [attrs("a", 0.5, 0.0, false)];
    e.upsert(Batch {
        ids: &[1],
        texts: None,
        vectors: Some(&[0.0, 1.0]),
        attrs: &a,
    })
    .unwrap();
    let hits = e.search(&request(None, Some(&q), Mode::Vector)).unwrap();
    assert!(close(hits.signals[0].cosine.unwrap() as f64, 1.0));
    assert_eq!(hits.ids.len(), 3);
}

#[test]
fn bad_input_changes_nothing() {
    let mut e = three();
    let a = [attrs("a", 0.5, 0.0, false)];
    let texts = vec!["x".to_string()];
    for (vectors, attrs_ok) in [
        (Some(&[1.0f32, 2.0, 3.0][..]), true),
        (Some(&[f32::NAN, 1.0][..]), true),
        // Finite and non-zero, but no unit vector in f32 (issue 14).
        (Some(&[1e-45f32, 1e-45][..]), true),
        (Some(&[1e38f32, 3e38][..]), true),
    ] {
        assert!(attrs_ok);
        assert!(e
            .upsert(Batch {
                ids: &[9],
                texts: Some(&texts),
                vectors,
                attrs: &a,
            })
            .is_err());
    }
    let mut bad = a.clone();
    bad[0].importance = f32::NAN;
    assert!(e
        .upsert(Batch {
            ids: &[9],
            texts: Some(&texts),
            vectors: None,
            attrs: &bad,
        })
        .is_err());
    assert!(matches!(
        e.upsert(Batch {
            ids: &[9],
            texts: None,
            vectors: None,
            attrs: &a,
        }),
        Err(Error::UnknownId(9))
    ));
    assert!(matches!(e.remove(&[1, 9], false), Err(Error::UnknownId(9))));
    assert_eq!(e.len(), 3);
    assert_eq!(e.remove(&[1, 9], true).unwrap(), 1);
    assert_eq!(e.len(), 2);
    assert!(!e.has_vector(1));
    let q = [1.0, 0.0, 0.0];
    assert!(matches!(
        e.search(&request(None, Some(&q), Mode::Vector)),
        Err(Error::DimensionMismatch {
            expected: 2,
            got: 3
        })
    ));
}

#[test]
fn ids_where_orders_by_creation() {
    let e = three();
    assert_eq!(e.ids_where(None, Order::CreatedDesc, 0, 10), vec![1, 2, 3]);
    assert_eq!(e.ids_where(None, Order::CreatedAsc, 1, 1), vec![2]);
    let f = e.parse_filter(r#"{"agent_id": "a"}"#).unwrap();
    assert_eq!(e.ids_where(Some(&f), Order::CreatedAsc, 0, 10), vec![2, 1]);
    assert_eq!(e.count(Some(&f)), 2);
    assert_eq!(e.count(None), 3);
}

#[test]
fn snapshot_round_trip_and_damage() {
    let dir = std::env::temp_dir().join(format!("memlane-engine-snap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut e = three();
    e.index_pending(2).unwrap();
    e.remove(&[2], false).unwrap();
    e.save(&dir, 7, 0, false).unwrap();
    e.save(&dir, 7, 0, false).unwrap();
    let (mut l, seq, _) = Engine::load(&dir).unwrap();
    assert_eq!(seq, 7);
    assert_eq!(l.len(), 2);
    assert_eq!(l.pending(), e.pending());
    let q = [1.0, 0.0];
    // The graph's live vectors are the caller's to give back (its database
    // holds them); the parked one is in the snapshot. Until then, no search.
    let linked: Vec<u64> = [1, 3]
        .into_iter()
        .filter(|&id| !e.pending.contains(id))
        .collect();
    assert_eq!(l.awaiting(), linked);
    assert!(l.search(&request(None, Some(&q), Mode::Vector)).is_err());
    // A row the index would refuse leaves its id awaiting.
    l.fill(&[1], &[f32::NAN, 0.0]).unwrap();
    assert_eq!(l.awaiting(), linked);
    l.fill(&[1, 2, 3], &[1.0, 0.0, 0.6, 0.8, 0.0, 1.0]).unwrap();
    assert!(l.awaiting().is_empty());
    let a = e
        .search(&request(Some("mode"), Some(&q), Mode::Hybrid))
        .unwrap();
    let b = l
        .search(&request(Some("mode"), Some(&q), Mode::Hybrid))
        .unwrap();
    assert_eq!(a.ids, b.ids);
    assert_eq!(a.scores, b.scores);
    let f = l.parse_filter(r#"{"metadata.agent": "b"}"#).unwrap();
    assert_eq!(l.count(Some(&f)), 1);
    // Public ids and access counts come back too.
    e.touch(&[3], 1.0);
    e.save(&dir, 9, 0, false).unwrap();
    let (l, ..) = Engine::load(&dir).unwrap();
    let f = l
        .parse_filter(r#"{"id": {"$in": ["b-0.1", "a-0.9"]}, "access_count": 1}"#)
        .unwrap();
    assert_eq!(l.ids_where(Some(&f), Order::CreatedAsc, 0, 10), vec![3]);
    let f = l.parse_filter(r#"{"id": {"$nin": ["b-0.1"]}}"#).unwrap();
    assert_eq!(l.ids_where(Some(&f), Order::CreatedAsc, 0, 10), vec![1]);

    // A newer snapshot replaces the older.
    e.save(&dir, 10, 0, false).unwrap();
    assert_eq!(Engine::load(&dir).unwrap().1, 10);
    assert!(!dir.join(format!("snapshot-{:020}", 9)).exists());

    let rec = dir.join(format!("snapshot-{:020}", 10)).join("records.bin");
    let mut bytes = std::fs::read(&rec).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    std::fs::write(&rec, &bytes).unwrap();
    assert!(matches!(Engine::load(&dir), Err(Error::Corrupt { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(Engine::load(&dir), Err(Error::NotFound(_))));
}

fn snapshot_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("memlane-engine-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A sibling file of an older save, copied into the newest snapshot, loads on
/// its own and its ids may agree with the records: its stamp gives it away.
#[test]
fn snapshot_refuses_a_sibling_of_another_save() {
    let dir = snapshot_dir("mixed");
    let mut e = three();
    e.index_pending(3).unwrap();
    e.save(&dir, 1, 41, false).unwrap();
    let older = dir.join(format!("snapshot-{:020}", 1));
    let saved: Vec<(&str, Vec<u8>)> = ["bm25.bin", "hnsw.bin"]
        .into_iter()
        .map(|f| (f, std::fs::read(older.join(f)).unwrap()))
        .collect();
    // The same ids, one text and one vector changed.
    let texts = vec!["light roast coffee".to_string()];
    e.upsert(Batch {
        ids: &[3],
        texts: Some(&texts),
        vectors: Some(&[0.8, 0.6]),
        attrs: &[attrs("b", 0.1, 0.0, true)],
    })
    .unwrap();
    e.index_pending(3).unwrap();
    e.save(&dir, 2, 42, false).unwrap();
    let (l, seq, history) = Engine::load(&dir).unwrap();
    assert_eq!((l.len(), seq, history), (3, 2, 42));
    let newest = dir.join(format!("snapshot-{:020}", 2));
    for (name, old) in &saved {
        let current = std::fs::read(newest.join(name)).unwrap();
        std::fs::write(newest.join(name), old).unwrap();
        match Engine::load(&dir) {
            Err(Error::Corrupt { path, reason }) => {
                assert_eq!(path, newest.join(name));
                assert!(reason.contains("another snapshot's"), "{reason}");
            }
            other => panic!(
                "{name} of an older save was taken: {:?}",
                other.map(|r| r.1)
            ),
        }
        std::fs::write(newest.join(name), current).unwrap();
    }
    assert!(Engine::load(&dir).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A snapshot of an older version is refused (the caller rebuilds from its
/// database: version 9 holds only whether a text asks, not how much), and
/// how much each text asks comes back from the current one.
#[test]
fn snapshot_of_an_older_version_is_refused_and_questions_round_trip() {
    let dir = snapshot_dir("v9");
    let mut e = engine(None);
    let texts = vec![
        "Where did you go?".to_string(),
        "To Porto.".to_string(),
        "I went to Porto! And you?".to_string(),
    ];
    let a = attrs("a", 0.5, 0.0, false);
    e.upsert(Batch {
        ids: &[1, 2, 3],
        texts: Some(&texts),
        vectors: None,
        attrs: &[a.clone(), a.clone(), a],
    })
    .unwrap();
    e.save(&dir, 5, 77, true).unwrap();
    let (l, seq, history) = Engine::load(&dir).unwrap();
    assert_eq!((seq, history), (5, 77));
    let share = |e: &Engine, id| e.records.questions[e.records.slot(id).unwrap() as usize];
    assert_eq!([1, 2, 3].map(|id| share(&l, id)), [255, 0, 90]);
    let records = dir.join(format!("snapshot-{:020}", 5)).join("records.bin");
    let (_, payload) = persist::load(&records, snapshot::KIND, snapshot::VERSION).unwrap();
    for older in [snapshot::VERSION - 1, 8] {
        persist::save(&records, snapshot::KIND, older, &payload).unwrap();
        match Engine::load(&dir) {
            Err(Error::Corrupt { reason, .. }) => assert!(reason.contains("older"), "{reason}"),
            other => panic!("version {older} was taken: {:?}", other.map(|r| r.1)),
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn one_percent_filter_examines_one_percent() {
    let mut e = engine(None);
    let n = 20_000u64;
    let ids: Vec<u64> = (0..n).collect();
    let texts: Vec<String> = ids.iter().map(|i| format!("memory number {i}")).collect();
    let a: Vec<Attrs> = ids
        .iter()
        .map(|i| attrs(&format!("agent{}", i % 100), 0.5, 0.0, false))
        .collect();
    e.upsert(Batch {
        ids: &ids,
        texts: Some(&texts),
        vectors: None,
        attrs: &a,
    })
    .unwrap();
    let f = e
        .parse_filter(r#"{"$and": [{"table": "memories"}, {"metadata.agent": "agent7"}, {"importance": {"$gt": 0.1}}]}"#)
        .unwrap();
    let s = e.select(&f);
    assert_eq!(s.slots.len(), 200);
    assert_eq!(s.examined, 200);
}

#[test]
fn nearest_per_group_respects_filters_and_threshold() {
    let e = three();
    let only_a = e.parse_filter(r#"{"agent_id": "a"}"#).unwrap();
    let only_b = e.parse_filter(r#"{"agent_id": "b"}"#).unwrap();
    let queries = [1.0, 0.0, 1.0, 0.0, 0.0, 2.0, 1.0, 1.0];
    let got = e
        .nearest(&queries, &[0, 1, 0, 0], &[only_a, only_b], 0.9)
        .unwrap();
    // (1, 0): record 1 in scope a; record 3 (0, 1) is b's but has cosine 0.
    assert_eq!(got[0].map(|h| h.0), Some(1));
    assert_eq!(got[1], None);
    // (0, 2) unnormalised: record 2 (0.6, 0.8) has cosine 0.8 < 0.9.
    assert_eq!(got[2], None);
    // (1, 1)/√2: record 2 at 0.99 beats record 1 at 0.71.
    let (id, cos) = got[3].unwrap();
    assert_eq!(id, 2);
    assert!((cos - 1.4 / 2f32.sqrt()).abs() < 1e-3);
    // Mismatched shapes and unknown groups are refused.
    assert!(e.nearest(&[1.0], &[0], &[Filter::all()], 0.5).is_err());
    assert!(e.nearest(&[1.0, 0.0], &[1], &[Filter::all()], 0.5).is_err());
    assert!(e.nearest(&[0.0, 0.0], &[0], &[Filter::all()], 0.5).is_err());
}

#[test]
fn a_dotted_metadata_key_is_not_a_nested_path() {
    let flat = flatten_metadata(r#"{"a.b": 1, "a": {"b": 2}, "c\\d": 3}"#).unwrap();
    let keys: Vec<&str> = flat.iter().map(|(k, _)| k.as_str()).collect();
    assert!(keys.contains(&"a\\.b") && keys.contains(&"a.b") && keys.contains(&"c\\\\d"));
    let mut e = engine(None);
    let mut one = attrs("a", 0.5, 0.0, false);
    one.metadata = flatten_metadata(r#"{"a.b": 1}"#).unwrap();
    let mut two = attrs("b", 0.5, 0.0, false);
    two.metadata = flatten_metadata(r#"{"a": {"b": 1}}"#).unwrap();
    let texts: Vec<String> = vec!["x".into(), "y".into()];
    e.upsert(Batch {
        ids: &[1, 2],
        texts: Some(&texts),
        vectors: None,
        attrs: &[one, two],
    })
    .unwrap();
    let nested = e.parse_filter(r#"{"a.b": 1}"#).unwrap();
    assert_eq!(
        e.ids_where(Some(&nested), Order::CreatedAsc, 0, 10),
        vec![2]
    );
    let literal = e.parse_filter(r#"{"a\\.b": 1}"#).unwrap();
    assert_eq!(
        e.ids_where(Some(&literal), Order::CreatedAsc, 0, 10),
        vec![1]
    );
}

/// A search asked again takes its retrieval from the cache and scores it
/// afresh: after the first search recorded its accesses, the second one's
/// scores are those of an engine that retrieves anew.
#[test]
fn a_repeated_search_reuses_its_retrieval_and_scores_afresh() {
    let (cached, mut fresh) = (three(), three());
    let q = [0.8, 0.6];
    let mut r = request(Some("dark mode"), Some(&q), Mode::Hybrid);
    r.touch = true;
    r.rate = 0.01;
    r.weights = Weights::resolve(Some(1.0), Some(0.5), Some(0.5)).unwrap();
    let first = cached.search(&r).unwrap();
    assert_eq!(first, fresh.search(&r).unwrap());
    assert_eq!(cached.retrievals.len(), 1);
    r.now += HOUR;
    let again = cached.search(&r).unwrap();
    fresh.set_ef(fresh.ef().unwrap()).unwrap(); // any change empties the cache
    assert_eq!(fresh.retrievals.len(), 0);
    assert_eq!(again, fresh.search(&r).unwrap());
    assert_eq!(cached.retrievals.len(), 1);
    // Asked otherwise (another pool, mode or text), it retrieves anew.
    r.candidates = 7;
    cached.search(&r).unwrap();
    r.mode = Mode::Text;
    cached.search(&r).unwrap();
    assert_eq!(cached.retrievals.len(), 3);
}

#[test]
fn every_change_to_the_engine_is_seen_by_a_repeated_search() {
    let mut e = three();
    let q = [1.0, 0.0];
    // One candidate per list: a stale retrieval would hold none of the new hits.
    let mut r = request(Some("dark mode"), Some(&q), Mode::Hybrid);
    (r.k, r.candidates) = (1, 1);
    assert_eq!(e.search(&r).unwrap().ids, [1]);
    e.remove(&[1], false).unwrap();
    assert_eq!(e.search(&r).unwrap().ids.len(), 1);
    assert_ne!(e.search(&r).unwrap().ids, [1]);
    let texts = vec!["dark mode everywhere".to_string()];
    e.upsert(Batch {
        ids: &[9],
        texts: Some(&texts),
        vectors: Some(&[1.0, 0.0]),
        attrs: &[attrs("a", 0.5, 100.0 * HOUR, false)],
    })
    .unwrap();
    let parked = e.search(&r).unwrap();
    assert_eq!(parked.ids[0], 9);
    e.index_pending(usize::MAX).unwrap();
    let linked = e.search(&r).unwrap();
    assert_eq!(linked.ids, parked.ids);
    // Superseding (an upsert of attributes) leaves current searches.
    let mut closed = attrs("a", 0.5, 100.0 * HOUR, false);
    closed.valid_to = Some(1.0);
    e.upsert(Batch {
        ids: &[9],
        texts: None,
        vectors: None,
        attrs: &[closed],
    })
    .unwrap();
    r.current_only = true;
    let current = e.search(&r).unwrap().ids;
    assert_eq!(current.len(), 1);
    assert_ne!(current, [9]);
}

/// Searches change the access columns without `&mut`: a filter on them is
/// evaluated every time.
#[test]
fn a_filter_on_accesses_is_never_answered_from_the_cache() {
    let e = three();
    let f = Filter::parse(r#"{"access_count": {"$lt": 1}}"#, &e.records).unwrap();
    assert!(f.reads_access());
    assert!(!Filter::parse(r#"{"agent_id": "a"}"#, &e.records)
        .unwrap()
        .reads_access());
    let q = [1.0, 0.0];
    let mut r = request(Some("dark mode"), Some(&q), Mode::Hybrid);
    r.filter = Some(&f);
    r.k = 1;
    r.touch = true;
    let first = e.search(&r).unwrap().ids;
    let second = e.search(&r).unwrap().ids;
    assert_eq!(first.len(), 1);
    assert_ne!(first, second, "the hit touched first has an access now");
    assert_eq!(e.retrievals.len(), 0);
}

/// Ids 1 to 4 with `texts`, 2-d `vectors` and attributes `a`.
fn four(texts: [&str; 4], vectors: [f32; 8], a: &[Attrs]) -> Engine {
    let mut e = engine(Some(2));
    let texts: Vec<String> = texts.map(String::from).into();
    e.upsert(Batch {
        ids: &[1, 2, 3, 4],
        texts: Some(&texts),
        vectors: Some(&vectors),
        attrs: a,
    })
    .unwrap();
    e
}

/// Ids 1 to 4 with `texts` and 2-d `vectors`, an hour apart: the first three
/// turns of one session, the last a record outside any.
fn session_and_record(texts: [&str; 4], vectors: [f32; 8]) -> Engine {
    let mut a: Vec<Attrs> = (0..4)
        .map(|i| attrs("a", 0.5, f64::from(i) * HOUR, false))
        .collect();
    for turn in &mut a[..3] {
        turn.scope[4] = Some("s".into());
    }
    four(texts, vectors, &a)
}

/// A session of three turns, the answer sharing no word with the question
/// its neighbour asked, and a long record outside any session.
fn conversation() -> Engine {
    session_and_record(
        [
            "do you go hiking",
            "yes, every sunday morning with my brother and our dogs",
            "nice, me too",
            "hiking boots trails maps tents stoves ropes compasses and packs",
        ],
        [0.0, 1.0, 0.8, 0.6, 0.0, 1.0, 0.8, 0.6],
    )
}

fn signals_of(e: &Engine, weight: f64) -> (Vec<u64>, rustc_hash::FxHashMap<u64, Signals>) {
    let q = [1.0, 0.0];
    let mut r = request(Some("hiking"), Some(&q), Mode::Hybrid);
    r.context_weight = weight;
    // The pass's arithmetic at a known weight (the default's is per query).
    r.fusion = Fusion::weighted(0.5).unwrap();
    let hits = e.search(&r).unwrap();
    let by_id = hits.ids.iter().copied().zip(hits.signals).collect();
    (hits.ids, by_id)
}

#[test]
fn contextual_bm25_lends_a_turn_its_neighbours_words() {
    let e = conversation();
    let ceiling = e.bm25.ceiling("hiking");
    let (ids, s) = signals_of(&e, 0.0);
    // Alone, the answer has no BM25 and ranks below the long record.
    assert_eq!(&ids[..2], &[4, 2]);
    assert_eq!(s[&2].bm25, Some(0.0));
    let context = f64::from(s[&2].bm25_context.unwrap());
    assert!(context > 0.0);
    assert_eq!(s[&4].bm25_context, None);

    let (ids, s) = signals_of(&e, 1.0);
    let at = |id| ids.iter().position(|&x| x == id).unwrap();
    assert!(at(2) < at(4));
    assert!(close(s[&2].relevance, 0.5 * 0.8 + 0.5 * context / ceiling));
    let own = f64::from(s[&4].bm25.unwrap());
    assert!(close(s[&4].relevance, 0.5 * 0.8 + 0.5 * own / ceiling));
    let (_, s) = signals_of(&e, 0.2);
    assert!(close(
        s[&2].relevance,
        0.5 * 0.8 + 0.5 * 0.2 * context / ceiling
    ));
    // The question's own context holds its answer's length, not its words.
    let question = &s[&1];
    assert!(question.bm25_context.unwrap() > 0.0);
    assert!(question.bm25_context.unwrap() < question.bm25.unwrap());
}

#[test]
fn a_turn_takes_its_cosine_from_its_neighbours_where_theirs_is_higher() {
    let e = conversation();
    // The question's vector is far from the query's; its answer's is near.
    let (_, s) = signals_of(&e, 0.0);
    assert_eq!(s[&1].cosine, Some(0.0));
    assert_eq!(s[&1].cosine_context, Some(0.8));
    // The answer's neighbours are farther: it keeps its own.
    assert_eq!(s[&2].cosine_context, Some(0.0));
    assert_eq!(s[&4].cosine_context, None);
    let bm = |s: &Signals, w: f64| {
        let own = f64::from(s.bm25.unwrap());
        (1.0 - w) * own + w * f64::from(s.bm25_context.unwrap())
    };
    let ceiling = e.bm25.ceiling("hiking");
    for w in [0.2, 1.0] {
        let (_, s) = signals_of(&e, w);
        let q = &s[&1];
        assert!(close(
            q.relevance,
            0.5 * (w * 0.8) + 0.5 * bm(q, w) / ceiling
        ));
        assert!(close(
            s[&2].relevance,
            0.5 * 0.8 + 0.5 * bm(&s[&2], w) / ceiling
        ));
    }
}

/// A session whose question is near the query and whose answer is far from
/// it, then a reply that answers nothing, and a record outside any session.
fn question_and_answer() -> Engine {
    session_and_record(
        [
            "do you go hiking?",
            "yes, every sunday morning",
            "me too",
            "the weather",
        ],
        [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.6, 0.8],
    )
}

fn answered(e: &Engine, weight: f64) -> rustc_hash::FxHashMap<u64, Signals> {
    let q = [1.0, 0.0];
    let mut r = request(Some("weather"), Some(&q), Mode::Hybrid);
    r.context_weight = 0.0;
    r.answer_weight = weight;
    r.fusion = Fusion::weighted(0.5).unwrap();
    r.k = 10;
    let hits = e.search(&r).unwrap();
    hits.ids.iter().copied().zip(hits.signals).collect()
}

#[test]
fn how_much_of_a_text_asks() {
    use super::records::question_share;
    let cases = [
        ("", 0),
        ("   ", 0),
        ("To Porto.", 0),
        ("Where did you go?", 255),
        ("?", 255),
        // 14 of 27 characters (whitespace not counted) ask.
        ("I adopted a pup! Do you have pets?", 133),
        ("Really?! That's great.", 102),
        // A mark before a letter or digit ends no sentence: a number, a link's query.
        ("It took 3.5 hours, a?b then", 0),
        ("The forecast at https://w.example/porto?day=1 says sun.", 0),
        // A closing bracket or an emoji after the mark: the sentence ended.
        ("(Do you know Porto?) It is sunny.", 152),
        ("Is it sunny?\u{1F31E} Yes.", 170),
        ("\u{BF}Qu\u{E9} tal", 255),
        // Full-width marks end a sentence before the next character.
        (
            "\u{4F60}\u{597D}\u{5417}\u{FF1F}\u{6211}\u{5F88}\u{597D}\u{3002}",
            128,
        ),
    ];
    for (text, want) in cases {
        assert_eq!(question_share(text), want, "{text:?}");
    }
    // Whatever the text, no question mark asks nothing, and a text that ends
    // with one, or holds an opening one, asks something.
    let mut rng = crate::testdata::Rng(7);
    let alphabet = [
        'a', '1', ' ', '.', '!', '?', ')', '\u{FF1F}', '\u{3002}', '\n', '\u{BF}',
    ];
    for _ in 0..20_000 {
        let n = rng.below(40);
        let text: String = (0..n)
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
            .collect();
        let share = question_share(&text);
        if !text.contains(['?', '\u{FF1F}', '\u{BF}', '\u{61F}']) {
            assert_eq!(share, 0, "{text:?}");
        }
        if text.contains('\u{BF}') || text.trim_end().ends_with(['?', '\u{FF1F}']) {
            assert!(share > 0, "{text:?}");
        }
    }
}

/// Two memories alike to the query in every way but that one asks.
fn asked_and_told() -> Engine {
    let mut e = engine(Some(2));
    let texts = vec![
        "what is the porto weather like?".to_string(),
        "the porto weather is mild. do you know it?".to_string(),
        "the porto weather is mild".to_string(),
    ];
    let a = attrs("a", 0.5, HOUR, false);
    e.upsert(Batch {
        ids: &[1, 2, 3],
        texts: Some(&texts),
        vectors: Some(&[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]),
        attrs: &[a.clone(), a.clone(), a],
    })
    .unwrap();
    e
}

#[test]
fn a_memory_that_asks_loses_its_share_of_the_question_weight() {
    let e = asked_and_told();
    let q = [1.0, 0.0];
    let search = |weight: f64, mode: Mode, fusion: Fusion| {
        let mut r = request(Some("porto weather"), Some(&q), mode);
        r.question_weight = weight;
        r.fusion = fusion;
        let hits = e.search(&r).unwrap();
        hits.ids
            .iter()
            .copied()
            .zip(hits.signals)
            .collect::<rustc_hash::FxHashMap<u64, Signals>>()
    };
    let weighted = Fusion::weighted(0.5).unwrap();
    let off = search(0.0, Mode::Hybrid, weighted);
    assert!(off.values().all(|s| s.question.is_none()));
    for w in [crate::fusion::DEFAULT_QUESTION_WEIGHT, 0.5, 1.0] {
        for fusion in [weighted, Fusion::Adaptive] {
            let on = search(w, Mode::Hybrid, fusion);
            let base = search(0.0, Mode::Hybrid, fusion);
            // 12 of the second's 34 characters ask.
            for (id, share) in [(1, 1.0), (2, 90.0 / 255.0), (3, 0.0)] {
                let asked = on[&id].question.unwrap();
                assert!(close(asked, share), "{id}: {asked}");
                assert!(close(
                    on[&id].relevance,
                    base[&id].relevance * (1.0 - w * asked)
                ));
                assert!(close(on[&id].score, on[&id].relevance * on[&id].boost));
            }
        }
    }
    // Where the fusion is by rank, or one retriever is asked alone, nothing asks.
    for (mode, fusion) in [
        (Mode::Hybrid, Fusion::rrf(60.0).unwrap()),
        (Mode::Text, weighted),
        (Mode::Vector, weighted),
    ] {
        let on = search(1.0, mode, fusion);
        let base = search(0.0, mode, fusion);
        for id in [1, 2, 3] {
            assert_eq!(on[&id].question, None);
            assert_eq!(on[&id].relevance, base[&id].relevance);
        }
    }
}

#[test]
fn a_turn_that_answers_the_question_before_it_takes_its_cosine() {
    let mut e = question_and_answer();
    let s = answered(&e, 0.0);
    assert_eq!(s[&2].cosine, Some(0.0));
    assert_eq!(s[&2].cosine_asked, Some(1.0));
    // The question asks; the reply follows an answer; the record has no session.
    assert_eq!(
        (s[&1].cosine_asked, s[&3].cosine_asked, s[&4].cosine_asked),
        (None, None, None)
    );
    assert!(close(s[&2].relevance, 0.0));
    for w in [0.4, 1.0] {
        let s = answered(&e, w);
        assert!(close(s[&2].relevance, 0.5 * w), "{w}");
        assert!(close(s[&3].relevance, 0.0), "{w}");
    }
    // A turn that asks answers nothing; a rewrite of its text decides.
    let mut a = attrs("a", 0.5, HOUR, false);
    a.scope[4] = Some("s".into());
    let rewrite = |e: &mut Engine, text: Option<&str>| {
        let texts: Vec<String> = text.into_iter().map(String::from).collect();
        e.upsert(Batch {
            ids: &[2],
            texts: text.map(|_| texts.as_slice()),
            vectors: None,
            attrs: std::slice::from_ref(&a),
        })
        .unwrap();
    };
    rewrite(&mut e, Some("yes, do you?"));
    assert_eq!(answered(&e, 0.4)[&2].cosine_asked, None);
    rewrite(&mut e, Some("yes, every sunday"));
    assert_eq!(answered(&e, 0.4)[&2].cosine_asked, Some(1.0));
    // Attributes alone (no text) keep what the text said.
    rewrite(&mut e, None);
    assert_eq!(answered(&e, 0.4)[&2].cosine_asked, Some(1.0));
    // The question gone, the answer follows nothing.
    e.remove(&[1], false).unwrap();
    assert_eq!(answered(&e, 0.4)[&2].cosine_asked, None);
}

#[test]
fn contextual_bm25_follows_removals_and_snapshots() {
    let dir = std::env::temp_dir().join(format!("memlane-engine-ctx-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut e = conversation();
    e.save(&dir, 1, 0, false).unwrap();
    let (l, ..) = Engine::load(&dir).unwrap();
    assert_eq!(signals_of(&l, 0.2), signals_of(&e, 0.2));
    // The question gone, the answer's context holds no query word.
    e.remove(&[1], false).unwrap();
    let (_, s) = signals_of(&e, 0.2);
    assert_eq!(s[&2].bm25_context, Some(0.0));
    // A turn added before the answer is its new neighbour.
    let texts = vec!["hiking again?".to_owned()];
    let mut a = attrs("a", 0.5, 0.5 * HOUR, false);
    a.scope[4] = Some("s".into());
    e.upsert(Batch {
        ids: &[5],
        texts: Some(&texts),
        vectors: Some(&[0.0, 1.0]),
        attrs: &[a],
    })
    .unwrap();
    let (_, s) = signals_of(&e, 0.2);
    assert!(s[&2].bm25_context.unwrap() > 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A turn expired at the search's `now` lends no words, removed yet or not:
/// the turns beside it are neighbours, as its removal will make them. A
/// retrieval kept from a search at another time is not reused across an
/// expiry.
#[test]
fn contextual_bm25_passes_expired_turns() {
    let mut e = conversation();
    // The question expires at 150 h; a turn between it and the answer at 120 h.
    let texts = vec!["do you go hiking".to_owned(), "wait".to_owned()];
    let mut a = [
        attrs("a", 0.5, 0.0, false),
        attrs("a", 0.5, 0.5 * HOUR, false),
    ];
    for (turn, at) in a.iter_mut().zip([150.0, 120.0]) {
        turn.scope[4] = Some("s".into());
        turn.expires_at = Some(at * HOUR);
    }
    e.upsert(Batch {
        ids: &[1, 5],
        texts: Some(&texts),
        vectors: Some(&[0.0, 1.0, 0.0, 1.0]),
        attrs: &a,
    })
    .unwrap();
    let q = [1.0, 0.0];
    let context_at = |hours: f64| {
        let mut r = request(Some("hiking"), Some(&q), Mode::Hybrid);
        r.now = hours * HOUR;
        let hits = e.search(&r).unwrap();
        let at = hits.ids.iter().position(|&id| id == 2).unwrap();
        hits.signals[at].bm25_context.unwrap()
    };
    // Before 120 h the answer follows "wait"; from then on the question,
    // until it expires too.
    assert_eq!(context_at(100.0), 0.0);
    assert!(context_at(120.0) > 0.0);
    assert!(context_at(149.0) > 0.0);
    assert_eq!(context_at(150.0), 0.0);
    assert_eq!(context_at(100.0), 0.0, "a clock set back");
    assert!(context_at(130.0) > 0.0);
    assert_eq!(e.retrievals.len(), 1);
}

/// A chat of the user with Caroline, plus a record that is no turn; text only.
fn chat() -> Engine {
    let texts: Vec<String> = [
        "the dog is called rex",
        "our dog is called max, the dog barks at every dog",
        "dog food on offer",
    ]
    .map(String::from)
    .into();
    let speakers = [Some("user"), Some("Caroline"), None];
    let a: Vec<Attrs> = speakers
        .iter()
        .enumerate()
        .map(|(i, who)| {
            let mut a = attrs("a", 0.5, i as f64 * HOUR, false);
            a.id = Some(format!("r{i}"));
            a.speaker = who.map(String::from);
            a
        })
        .collect();
    let mut e = engine(None);
    e.upsert(Batch {
        ids: &[1, 2, 3],
        texts: Some(&texts),
        vectors: None,
        attrs: &a,
    })
    .unwrap();
    e
}

fn spoken(e: &Engine, text: &str, weight: f64) -> (Vec<u64>, rustc_hash::FxHashMap<u64, Signals>) {
    let mut r = request(Some(text), None, Mode::Text);
    r.speaker_weight = weight;
    let hits = e.search(&r).unwrap();
    let by_id = hits.ids.iter().copied().zip(hits.signals).collect();
    (hits.ids, by_id)
}

#[test]
fn a_named_speaker_lifts_their_turns() {
    let e = chat();
    let ceiling = e.bm25.ceiling("my dog");
    // Without the field, Caroline's turn says "dog" most.
    let (ids, _) = spoken(&e, "my dog", 0.0);
    assert_eq!(ids[0], 2);
    // "my" names the user: the speaker counts as one more query term.
    let (ids, s) = spoken(&e, "my dog", 0.5);
    assert_eq!(ids[0], 1);
    assert_eq!(s[&1].bm25_speaker, Some(true));
    assert_eq!(s[&2].bm25_speaker, Some(false));
    assert_eq!(s[&3].bm25_speaker, Some(false));
    let own = f64::from(s[&1].bm25.unwrap()) / ceiling;
    assert!(close(s[&1].relevance, (own + 0.5) / 1.5));
    let other = f64::from(s[&3].bm25.unwrap()) / ceiling;
    assert!(close(s[&3].relevance, other / 1.5));
    // A name names its speaker, whoever asks.
    let (ids, s) = spoken(&e, "what did Caroline say about the dog", 0.5);
    assert_eq!(ids[0], 2);
    assert_eq!(s[&2].bm25_speaker, Some(true));
    // A query naming no speaker keeps its BM25 shares.
    let (_, s) = spoken(&e, "dog", 0.5);
    let plain = f64::from(s[&1].bm25.unwrap()) / e.bm25.ceiling("dog");
    assert!(close(s[&1].relevance, plain));
}

#[test]
fn speakers_follow_removals_and_snapshots() {
    let dir = std::env::temp_dir().join(format!("memlane-engine-spk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut e = chat();
    e.save(&dir, 1, 0, false).unwrap();
    let (l, ..) = Engine::load(&dir).unwrap();
    assert_eq!(spoken(&l, "my dog", 0.5), spoken(&e, "my dog", 0.5));
    assert_eq!(l.records.speakers.len(), 2);
    // With no speaker left, a search does not look (None), as in a store of
    // records that are no turns.
    e.remove(&[1, 2], false).unwrap();
    assert!(e.records.speakers.is_empty());
    let (_, s) = spoken(&e, "my dog", 0.5);
    assert_eq!(s[&3].bm25_speaker, None);
    // A replacement that drops the speaker uncounts it.
    let mut e = chat();
    let mut a = attrs("a", 0.5, 0.0, false);
    a.id = Some("r0".into());
    e.upsert(Batch {
        ids: &[1],
        texts: Some(&["the dog is called rex".to_owned()]),
        vectors: None,
        attrs: &[a],
    })
    .unwrap();
    assert_eq!(e.records.speakers.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A text-only engine of `texts`, ids 1, 2, ... with `attrs`.
fn text_only(texts: &[String], attrs: &[Attrs]) -> Engine {
    let ids: Vec<u64> = (1..=texts.len() as u64).collect();
    let mut e = engine(None);
    e.upsert(Batch {
        ids: &ids,
        texts: Some(texts),
        vectors: None,
        attrs,
    })
    .unwrap();
    e
}

/// What a search of current records admits, in no scope.
fn unscoped(e: &Engine) -> Admitted {
    e.build_conditions(&Conditions::default(), None)
}

/// What a search of current records of `agent` admits, less what expired by `now`.
fn scoped(e: &Engine, agent: &str, now: f64) -> Admitted {
    let mut c = Conditions::default();
    c.scope[0] = Some(agent.into());
    e.build_conditions(&c, Some(now))
}

#[test]
fn the_vector_text_leaves_out_the_speakers_of_the_scope_alone() {
    let mut names: Vec<Attrs> = ["a", "b"]
        .iter()
        .map(|agent| {
            let mut a = attrs(agent, 0.5, 0.0, false);
            a.speaker = Some("Caroline".into());
            a
        })
        .collect();
    names[1].expires_at = Some(100.0);
    let texts = ["she painted".to_owned(), "she sang".to_owned()];
    let mut e = text_only(&texts, &names);
    let asked = "What did Caroline paint?";
    assert_eq!(
        e.vector_text(asked, || scoped(&e, "a", 50.0)).as_deref(),
        Some("What did paint?")
    );
    assert_eq!(
        e.vector_text(asked, || scoped(&e, "b", 50.0)).as_deref(),
        Some("What did paint?")
    );
    // Agent c has no turn of hers; b's turn has expired by 150.
    assert_eq!(e.vector_text(asked, || scoped(&e, "c", 50.0)), None);
    assert_eq!(e.vector_text(asked, || scoped(&e, "b", 150.0)), None);
    // However many turns of hers other scopes hold.
    let many: Vec<Attrs> = (0..500)
        .map(|i| {
            let mut a = attrs("z", 0.5, 0.0, false);
            a.id = Some(format!("z{i}"));
            a.speaker = Some("Caroline".into());
            a
        })
        .collect();
    let ids: Vec<u64> = (10..510).collect();
    let texts: Vec<String> = (0..500).map(|i| format!("turn {i}")).collect();
    e.upsert(Batch {
        ids: &ids,
        texts: Some(&texts),
        vectors: None,
        attrs: &many,
    })
    .unwrap();
    assert_eq!(e.vector_text(asked, || scoped(&e, "c", 50.0)), None);
    assert_eq!(
        e.vector_text(asked, || unscoped(&e)).as_deref(),
        Some("What did paint?")
    );
}

#[test]
fn the_vector_text_asks_each_spelling_and_version_of_a_name() {
    let turn = |agent: &str, who: &str, closed: bool| {
        let mut a = attrs(agent, 0.5, 0.0, false);
        a.id = Some(format!("{agent}-{who}"));
        a.speaker = Some(who.into());
        a.valid_to = closed.then_some(1.0);
        a
    };
    // One key for two spellings, the other scope's first; a's turn superseded.
    let texts = ["she sang".to_owned(), "she painted".to_owned()];
    let e = text_only(
        &texts,
        &[turn("y", "CAROLINE", false), turn("a", "Caroline", true)],
    );
    let asked = "What did Caroline paint?";
    assert_eq!(e.vector_text(asked, || scoped(&e, "a", 50.0)), None);
    let versions = || {
        let mut c = Conditions::default();
        c.scope[0] = Some("a".into());
        c.versions = Versions::Every;
        e.build_conditions(&c, Some(50.0))
    };
    assert_eq!(
        e.vector_text(asked, versions).as_deref(),
        Some("What did paint?")
    );
    assert_eq!(
        e.vector_text(asked, || scoped(&e, "y", 50.0)).as_deref(),
        Some("What did paint?")
    );
}

#[test]
fn the_vector_text_leaves_out_the_named_speakers() {
    let mut e = chat();
    // Caroline is a speaker; "user" is a role, whose name is never left out.
    assert_eq!(
        e.vector_text("What did Caroline's dog do?", || unscoped(&e))
            .as_deref(),
        Some("What did dog do?")
    );
    assert_eq!(
        e.vector_text("what did caroline say", || unscoped(&e)),
        None
    );
    assert_eq!(
        e.vector_text("What did the User say", || unscoped(&e)),
        None
    );
    assert_eq!(e.vector_text("Caroline?", || unscoped(&e)), None);
    assert_eq!(e.vector_text("What did Melanie say", || unscoped(&e)), None);
    // Once her turns are gone, her name is a word like any other.
    e.remove(&[2], false).unwrap();
    assert_eq!(
        e.vector_text("What did Caroline say?", || unscoped(&e)),
        None
    );
}

/// One text-only turn of each speaker, the first `closed` of them superseded.
fn spoken_by(speakers: &[&str], closed: usize) -> Engine {
    let texts: Vec<String> = speakers.iter().map(|s| format!("{s} said so")).collect();
    let a: Vec<Attrs> = speakers
        .iter()
        .enumerate()
        .map(|(i, who)| {
            let mut a = attrs("a", 0.5, 0.0, false);
            a.id = Some(format!("t{i}"));
            a.speaker = Some((*who).to_owned());
            a.valid_to = (i < closed).then_some(1.0);
            a
        })
        .collect();
    text_only(&texts, &a)
}

#[test]
fn only_names_the_speaker_pass_weighs_are_left_out() {
    // "Will" and "A" are stopwords: the pass cannot match them, so they stay.
    let e = spoken_by(&["Will", "A", "Ana Maria Silva Costa", "Mary Ann"], 0);
    assert_eq!(
        e.vector_text("What cake did Will bring?", || unscoped(&e)),
        None
    );
    assert_eq!(e.vector_text("A dog barked", || unscoped(&e)), None);
    // A name of more than three words stays; one of two goes, in any order.
    assert_eq!(
        e.vector_text("What did Ana Maria Silva Costa say?", || unscoped(&e)),
        None
    );
    assert_eq!(
        e.vector_text("Did Ann Mary come?", || unscoped(&e))
            .as_deref(),
        Some("Did come?")
    );
    // A superseded turn's speaker is not searched, so not left out.
    let e = spoken_by(&["Caroline", "Melanie"], 1);
    assert_eq!(
        e.vector_text("What did Caroline say?", || unscoped(&e)),
        None
    );
    assert_eq!(
        e.vector_text("What did Melanie say?", || unscoped(&e))
            .as_deref(),
        Some("What did say?")
    );
}

#[test]
fn a_message_as_a_transcript_line_has_its_speaker_read() {
    let texts: Vec<String> = ["Caroline: the dog is called rex", "Melanie: lovely"]
        .map(String::from)
        .into();
    let a: Vec<Attrs> = (0..2)
        .map(|i| {
            let mut a = attrs("a", 0.5, 0.0, false);
            a.tbl = "messages".into();
            a.id = Some(format!("m{i}"));
            a.read_speaker(&texts[i]);
            a
        })
        .collect();
    assert_eq!(a[0].speaker.as_deref(), Some("Caroline"));
    let e = text_only(&texts, &a);
    let (_, s) = spoken(&e, "what did Caroline say about the dog", 0.5);
    assert_eq!(s[&1].bm25_speaker, Some(true));
    assert_eq!(
        e.vector_text("What did Caroline and Melanie say?", || unscoped(&e))
            .as_deref(),
        Some("What did and say?")
    );
    // A given speaker, or a record that is no message, keeps what it has.
    let mut given = attrs("a", 0.5, 0.0, false);
    given.tbl = "messages".into();
    given.speaker = Some("user".into());
    given.read_speaker("Caroline: hello");
    assert_eq!(given.speaker.as_deref(), Some("user"));
    let mut other = attrs("a", 0.5, 0.0, false);
    other.read_speaker("Caroline: hello");
    assert_eq!(other.speaker, None);
}

/// Two texts that say the same and one that says something else of the same
/// person, with vectors in 3-d: the copies nearest the query, the distinct one
/// a little further (and longer, so BM25 ranks it last too).
fn repeated(dim: Option<usize>) -> Engine {
    let texts: Vec<String> = [
        "Ana lives in Porto near the river",
        "Ana lives in Porto near the old river",
        "Ana visited Porto last spring for a jazz concert with friends",
    ]
    .map(String::from)
    .into();
    let vectors = [0.9, 0.4359, 0.0, 0.88, 0.47, 0.0707, 0.8, 0.0, 0.6];
    let a: Vec<Attrs> = (0..3)
        .map(|i| {
            let mut a = attrs("a", 0.5, 0.0, false);
            a.id = Some(format!("r{i}"));
            a
        })
        .collect();
    let mut e = engine(dim);
    e.upsert(Batch {
        ids: &[1, 2, 3],
        texts: Some(&texts),
        vectors: dim.map(|_| &vectors[..]),
        attrs: &a,
    })
    .unwrap();
    e
}

#[test]
fn diversity_puts_a_distinct_hit_above_a_near_copy() {
    let e = repeated(Some(3));
    let q = [1.0, 0.0, 0.0];
    let mut r = request(Some("where does Ana live"), Some(&q), Mode::Vector);
    r.k = 2;
    let plain = e.search(&r).unwrap();
    assert_eq!(plain.ids, vec![1, 2]);
    r.diversity = 0.3;
    let diverse = e.search(&r).unwrap();
    assert_eq!(diverse.ids, vec![1, 3]);
    // Each hit keeps its own score and signals; only the order is MMR's.
    assert_eq!(diverse.scores[0], plain.scores[0]);
    assert!(close(diverse.signals[1].cosine.unwrap().into(), 0.8));
    assert_eq!(diverse.signals[1].score, diverse.scores[1]);
    // k beyond the candidates: every hit, the copy last.
    r.k = 10;
    assert_eq!(e.search(&r).unwrap().ids, vec![1, 3, 2]);
}

#[test]
fn without_vectors_diversity_compares_the_terms() {
    let e = repeated(None);
    let mut r = request(Some("Ana Porto"), None, Mode::Text);
    r.k = 2;
    assert_eq!(e.search(&r).unwrap().ids, vec![1, 2]);
    r.diversity = 0.3;
    assert_eq!(e.search(&r).unwrap().ids, vec![1, 3]);
}

#[test]
fn a_named_date_lifts_the_records_created_near_it() {
    // The same words, created on day 100 and on day 200.
    let texts: Vec<String> = vec!["pottery class".into(), "pottery class".into()];
    let day = 24.0 * HOUR;
    let a: Vec<Attrs> = [100.0 * day, 200.0 * day]
        .iter()
        .enumerate()
        .map(|(i, &at)| {
            let mut a = attrs("a", 0.5, at, false);
            a.id = Some(format!("r{i}"));
            a
        })
        .collect();
    let e = text_only(&texts, &a);
    let mut r = request(Some("pottery class"), None, Mode::Text);
    let plain = e.search(&r).unwrap();
    assert_eq!(plain.ids, vec![1, 2]);
    assert_eq!(plain.signals[0].date, None);
    let dates = [(200.0 * day, 201.0 * day)];
    r.dates = &dates;
    let dated = e.search(&r).unwrap();
    assert_eq!(dated.ids, vec![2, 1]);
    assert_eq!(dated.signals[0].date, Some(true));
    assert_eq!(dated.signals[1].date, Some(false));
    let w = crate::fusion::DEFAULT_DATE_WEIGHT;
    let base = plain.signals[0].relevance;
    assert!(close(dated.signals[0].relevance, (base + w) / (1.0 + w)));
    assert!(close(dated.signals[1].relevance, base / (1.0 + w)));
    // A date no candidate was created near, or the pass off: the order as before.
    let far = [(500.0 * day, 501.0 * day)];
    r.dates = &far;
    assert_eq!(e.search(&r).unwrap(), plain);
    r.dates = &dates;
    r.date_weight = 0.0;
    assert_eq!(e.search(&r).unwrap(), plain);
}

#[test]
fn a_question_asking_when_lifts_the_records_that_tell_a_time() {
    // As many terms, the same of the question; the first says nothing of the time.
    let texts: Vec<String> = vec![
        "Maria adopted Shadow, a small pup".into(),
        "Maria adopted Shadow last week".into(),
    ];
    let a: Vec<Attrs> = (0..2)
        .map(|i| {
            let mut a = attrs("a", 0.5, 100.0 * HOUR, false);
            a.id = Some(format!("r{i}"));
            a
        })
        .collect();
    let e = text_only(&texts, &a);
    let asked = request(Some("Did Maria adopt Shadow?"), None, Mode::Text);
    let plain = e.search(&asked).unwrap();
    assert_eq!(plain.ids, vec![1, 2]);
    assert_eq!(plain.signals[1].when, None);
    let mut r = request(Some("When did Maria adopt Shadow?"), None, Mode::Text);
    let told = e.search(&r).unwrap();
    assert_eq!(told.ids, vec![2, 1]);
    assert_eq!(told.signals[0].when, Some(true));
    assert_eq!(told.signals[1].when, Some(false));
    let w = crate::fusion::DEFAULT_WHEN_WEIGHT;
    r.when_weight = 0.0;
    let off = e.search(&r).unwrap();
    assert_eq!(off.ids, vec![1, 2]);
    assert_eq!(off.signals[0].when, None);
    let base = off.signals[1].relevance;
    assert!(close(told.signals[0].relevance, (base + w) / (1.0 + w)));
}

/// BM25's parameters weigh the statistics at query time: a snapshot saved
/// with Lucene's scores as one built with the engine's once they are set,
/// and a repeated search does not answer from the retrieval made before.
#[test]
fn bm25_parameters_set_after_a_load_score_as_if_built_with_them() {
    let dir = std::env::temp_dir().join(format!("memlane-engine-bm25-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let texts: Vec<String> = [
        "I love hiking",
        "we went hiking in the hills near the lake last sunday with my sister and her dog",
        "the lake was cold",
    ]
    .map(String::from)
    .into();
    let a: Vec<Attrs> = (0..3)
        .map(|i| attrs("a", 0.5, f64::from(i), false))
        .collect();
    let ours = text_only(&texts, &a);
    assert_eq!(ours.bm25_params(), Bm25Params::MEMORIES);
    let mut lucene = Engine::new(EngineConfig {
        bm25: Bm25Params::default(),
        ..EngineConfig::default()
    })
    .unwrap();
    lucene
        .upsert(Batch {
            ids: &[1, 2, 3],
            texts: Some(&texts),
            vectors: None,
            attrs: &a,
        })
        .unwrap();
    let r = request(Some("hiking lake"), None, Mode::Text);
    let before = lucene.search(&r).unwrap();
    assert_ne!(before.scores, ours.search(&r).unwrap().scores);
    lucene.save(&dir, 1, 0, false).unwrap();
    let (mut loaded, ..) = Engine::load(&dir).unwrap();
    assert_eq!(loaded.bm25_params(), Bm25Params::default());
    assert_eq!(loaded.search(&r).unwrap(), before);
    loaded.set_bm25_params(Bm25Params::MEMORIES);
    assert_eq!(loaded.search(&r).unwrap(), ours.search(&r).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pages_settled_under_the_buffers_change_no_search() {
    use crate::pages::{Settler, HUGE_PAGE};
    let (n, dim) = (6_000, 384);
    let mut e = engine(Some(dim));
    let add = |e: &mut Engine, from: usize, n: usize| {
        let ids: Vec<u64> = (from as u64..(from + n) as u64).collect();
        let texts: Vec<String> = ids
            .iter()
            .map(|i| format!("note {} of {}", i % 97, i % 13))
            .collect();
        let a: Vec<Attrs> = ids
            .iter()
            .map(|&i| attrs(&format!("agent{}", i % 3), 0.5, i as f64, false))
            .collect();
        let vectors = crate::testdata::clustered(n, dim, 20, from as u64);
        e.upsert(Batch {
            ids: &ids,
            texts: Some(&texts),
            vectors: Some(&vectors),
            attrs: &a,
        })
        .unwrap();
        while e.index_pending(4096).unwrap() > 0 {}
    };
    add(&mut e, 0, n);
    // The walk's codes alone span whole huge pages.
    assert!(e
        .regions()
        .iter()
        .any(|r| r.len >= n * dim && r.len >= 2 * HUGE_PAGE));
    let queries = crate::testdata::clustered(8, dim, 20, 99);
    let run = |e: &Engine| -> Vec<(Vec<u64>, Vec<f64>)> {
        queries
            .chunks(dim)
            .map(|q| {
                let hits = e
                    .search(&request(Some("note 5 of 7"), Some(q), Mode::Hybrid))
                    .unwrap();
                (hits.ids, hits.scores)
            })
            .collect()
    };
    let before = run(&e);
    let mut settler = Settler::default();
    assert!(settler.step(&e.regions(), 0) >= 2 * HUGE_PAGE);
    assert_eq!(settler.step(&e.regions(), usize::MAX), 0);
    assert_eq!(run(&e), before);
    // Growing moves buffers to new allocations, whose pages are left to settle.
    add(&mut e, n, 2 * n);
    assert!(settler.step(&e.regions(), 0) >= 2 * HUGE_PAGE);
    assert_eq!(settler.step(&e.regions(), usize::MAX), 0);
}

/// A scope's search, before and after a conversation turn is stored in
/// another scope: the same hits, scores and signals (how deep it searches,
/// the ages it counts from the newest candidate and the speaker pass were
/// decided by the whole store).
#[test]
fn another_scopes_turns_change_nothing_of_a_search() {
    let texts: Vec<String> = (0..150)
        .map(|i| format!("note {i} about the garden"))
        .collect();
    let a: Vec<Attrs> = (0..150)
        .map(|i| {
            let mut a = attrs("a", 0.5, f64::from(i) * HOUR, false);
            a.id = Some(format!("n{i}"));
            a
        })
        .collect();
    let mut e = text_only(&texts, &a);
    // A selection, and all records but a few listed (an exclusion); bound to
    // the records as each search binds its filter.
    let filters = [r#"{"agent_id": "a"}"#, r#"{"agent_id": {"$ne": "b"}}"#];
    let search = |e: &Engine| {
        // BM25's statistics are the store's: its scores may move, nothing else.
        let mut out = Vec::new();
        for f in filters.map(|f| e.parse_filter(f).unwrap()) {
            let mut r = request(Some("What did Bob say about the garden?"), None, Mode::Text);
            r.k = 5;
            r.filter = Some(&f);
            let hits = e.search(&r).unwrap();
            let seen = hits
                .signals
                .iter()
                .map(|s| (s.age_hours, s.recency, s.bm25_speaker));
            out.push((hits.ids.clone(), seen.collect::<Vec<_>>()));
        }
        out
    };
    let before = search(&e);
    assert!(before
        .iter()
        .all(|(_, seen)| seen.iter().all(|s| s.2.is_none())));
    let mut turn = attrs("b", 0.5, 1000.0 * HOUR, false);
    turn.id = Some("t".into());
    turn.scope[4] = Some("s".into());
    turn.speaker = Some("Bob".into());
    e.upsert(Batch {
        ids: &[1000],
        texts: Some(&["the garden is lovely".to_owned()]),
        vectors: None,
        attrs: &[turn],
    })
    .unwrap();
    assert_eq!(search(&e), before);
}

/// A turn's neighbour that the search leaves out lends it nothing: the
/// answer's contextual BM25 is its own.
#[test]
fn a_neighbour_the_search_leaves_out_lends_nothing() {
    let turn = |id: &str, at: f64| {
        let mut a = attrs("a", 0.5, at, false);
        a.id = Some(id.into());
        a.scope[4] = Some("s".into());
        a
    };
    let e = text_only(
        &[
            "Do you go hiking in the hills?".to_owned(),
            "Yes, every Sunday!".to_owned(),
        ],
        &[turn("q", 1.0), turn("a", 2.0)],
    );
    // The answer is record 2: its BM25 alone and joined with its neighbours.
    let answer = |filter: Option<&str>| {
        let f = filter.map(|f| e.parse_filter(f).unwrap());
        let mut r = request(Some("When does she go hiking on Sunday?"), None, Mode::Text);
        r.context_weight = 0.2;
        r.filter = f.as_ref();
        let hits = e.search(&r).unwrap();
        let at = hits
            .ids
            .iter()
            .position(|&h| h == 2)
            .expect("the answer is found");
        let s = &hits.signals[at];
        (s.bm25.unwrap(), s.bm25_context.unwrap())
    };
    let (own, joined) = answer(None);
    assert!(joined > own, "the question lends its words");
    for left_out in [
        r#"{"id": {"$ne": "q"}}"#,
        r#"{"id": "a"}"#,
        r#"{"created_at": {"$gte": 2.0}}"#,
    ] {
        let (own, joined) = answer(Some(left_out));
        assert_eq!(joined, own, "{left_out}");
    }
}

#[test]
fn hits_of_equal_score_rank_by_their_cosine() {
    // Cosines -0.995, -0.5 and -0.1 all weigh 0: the nearest of them still comes
    // first, in vector and hybrid mode, whatever the ids' order.
    let unit = |c: f32| [c, (1.0 - c * c).sqrt()];
    let [a, b, c, d] = [-0.995, -0.5, -0.1, 0.3].map(unit);
    let vectors = [a[0], a[1], b[0], b[1], c[0], c[1], d[0], d[1]];
    let same = attrs("a", 0.5, 100.0 * HOUR, false);
    let e = four(
        ["far", "mid", "near", "pos"],
        vectors,
        &[same.clone(), same.clone(), same.clone(), same],
    );
    let q = [1.0, 0.0];
    for mode in [Mode::Vector, Mode::Hybrid] {
        let hits = e.search(&request(Some("zzz"), Some(&q), mode)).unwrap();
        assert_eq!(hits.ids, vec![4, 3, 2, 1], "{mode:?}");
    }
}
