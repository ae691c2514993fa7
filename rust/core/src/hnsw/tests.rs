use super::snapshot::VERSION;
use super::*;
use crate::testdata::clustered;

fn exact(
    metric: Metric,
    data: &[f32],
    ids: &[u64],
    q: &[f32],
    k: usize,
    keep: impl Fn(u64) -> bool,
) -> Vec<u64> {
    let dim = q.len();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let mut all: Vec<(f32, u64)> = data
        .chunks_exact(dim)
        .zip(ids)
        .filter(|(_, &id)| keep(id))
        .map(|(v, &id)| {
            let dot: f32 = v.iter().zip(q).map(|(a, b)| a * b).sum();
            let d = match metric {
                Metric::L2 => v.iter().zip(q).map(|(a, b)| (a - b) * (a - b)).sum(),
                Metric::InnerProduct => 1.0 - dot,
                Metric::Cosine => 1.0 - dot / (norm(v) * norm(q)),
            };
            (d, id)
        })
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    all.into_iter().take(k).map(|(_, id)| id).collect()
}

fn recall(got: &[Neighbor], want: &[u64]) -> f64 {
    let hits = got.iter().filter(|n| want.contains(&n.id)).count();
    hits as f64 / want.len().max(1) as f64
}

fn build(metric: Metric, n: usize, dim: usize) -> (Hnsw, Vec<f32>, Vec<u64>) {
    let data = clustered(n, dim, 20, 7);
    let ids: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
    let mut h = Hnsw::new(dim, metric, Params::default()).unwrap();
    h.add(&ids, &data).unwrap();
    (h, data, ids)
}

fn mean_recall(
    h: &Hnsw,
    data: &[f32],
    ids: &[u64],
    queries: &[f32],
    allowed: Option<(&Allowed, &dyn Fn(u64) -> bool)>,
) -> f64 {
    let dim = h.dim();
    let mut total = 0.0;
    let nq = queries.len() / dim;
    for q in queries.chunks_exact(dim) {
        let got = h.search(q, 10, None, allowed.map(|a| a.0)).unwrap();
        let want = match allowed {
            Some((_, keep)) => exact(h.metric(), data, ids, q, 10, keep),
            None => exact(h.metric(), data, ids, q, 10, |_| true),
        };
        total += recall(&got, &want);
    }
    total / nq as f64
}

#[test]
fn recall_against_brute_force_for_each_metric() {
    for metric in [Metric::Cosine, Metric::InnerProduct, Metric::L2] {
        let (h, data, ids) = build(metric, 3000, 32);
        let queries = clustered(50, 32, 20, 99);
        let r = mean_recall(&h, &data, &ids, &queries, None);
        assert!(r >= 0.95, "{metric:?}: recall {r}");
        assert_eq!(h.len(), 3000);
    }
}

#[test]
fn filtered_search_keeps_recall_and_respects_the_filter() {
    let (h, data, ids) = build(Metric::Cosine, 4000, 32);
    let queries = clustered(40, 32, 20, 5);
    for every in [10u64, 100] {
        let keep = move |id: u64| id % every == 1;
        let allowed_ids: Vec<u64> = ids.iter().copied().filter(|&id| keep(id)).collect();
        let allowed = h.allowed(&allowed_ids);
        for q in queries.chunks_exact(32) {
            for n in h.search(q, 10, None, Some(&allowed)).unwrap() {
                assert!(keep(n.id));
            }
        }
        let r = mean_recall(&h, &data, &ids, &queries, Some((&allowed, &keep)));
        assert!(r >= 0.95, "1/{every} allowed: recall {r}");
    }
}

#[test]
fn deletions_and_reuse_keep_recall() {
    let dim = 32;
    let (mut h, data, ids) = build(Metric::L2, 4000, dim);
    // Remove 30%, then add new vectors that reuse the freed slots.
    let removed: Vec<u64> = ids.iter().copied().filter(|id| id % 10 < 3).collect();
    h.remove(&removed).unwrap();
    assert_eq!(h.len(), 4000 - removed.len());
    let extra = clustered(removed.len(), dim, 20, 1234);
    let extra_ids: Vec<u64> = (0..removed.len() as u64).map(|i| 1_000_000 + i).collect();
    h.add(&extra_ids, &extra).unwrap();
    assert_eq!(h.graph.slots(), 4000, "freed slots are reused");

    let mut all_data = Vec::new();
    let mut all_ids = Vec::new();
    for (v, &id) in data.chunks_exact(dim).zip(&ids) {
        if id % 10 >= 3 {
            all_data.extend_from_slice(v);
            all_ids.push(id);
        }
    }
    all_data.extend_from_slice(&extra);
    all_ids.extend_from_slice(&extra_ids);

    let queries = clustered(60, dim, 20, 77);
    let after = mean_recall(&h, &all_data, &all_ids, &queries, None);
    let mut fresh = Hnsw::new(dim, Metric::L2, Params::default()).unwrap();
    fresh.add(&all_ids, &all_data).unwrap();
    let baseline = mean_recall(&fresh, &all_data, &all_ids, &queries, None);
    assert!(
        after >= baseline - 0.01,
        "after deletions {after} vs fresh {baseline}"
    );
    for q in queries.chunks_exact(dim) {
        for n in h.search(q, 10, None, None).unwrap() {
            assert!(!removed.contains(&n.id) || n.id >= 1_000_000);
        }
    }
}

/// Nodes gone over by passes over the whole graph so far.
fn walked(h: &Hnsw) -> usize {
    h.walked.load(Ordering::Relaxed)
}

/// Links, on any level and from any node, into one of `targets`.
fn links_into_any(h: &Hnsw, targets: &[u32]) -> usize {
    let mut links = Vec::new();
    let mut n = 0;
    for s in 0..h.graph.slots() as u32 {
        for l in 0..=h.graph.level(s) {
            h.graph.read(s, l, &mut links);
            n += links.iter().filter(|x| targets.contains(x)).count();
        }
    }
    n
}

/// Whether a walk along level-0 links from the entry point reaches every
/// live node.
fn all_live_reached(h: &Hnsw) -> bool {
    let reached = reached_from(h, h.entry().unwrap().slot);
    (0..h.graph.slots()).all(|s| h.removed[s] || reached[s])
}

/// An add and an update of one record beside freed slots take no pass over
/// the whole graph: reusing a freed slot at once made each of them unlink
/// (a pass over every list) and check reachability (a walk over every
/// node), the work of the whole store for one record. The freed slots keep
/// routing searches meanwhile.
#[test]
fn an_add_or_update_beside_freed_slots_walks_no_whole_graph() {
    let dim = 16;
    let n = 3000;
    let (mut h, _, ids) = build(Metric::Cosine, n, dim);
    let before = walked(&h);
    h.remove(&ids[..5]).unwrap();
    let more = clustered(10, dim, 20, 31);
    for (i, v) in more.chunks_exact(dim).enumerate() {
        // Five new ids, then new vectors for five present ones.
        let id = if i < 5 { 1_000_000 + i as u64 } else { ids[i] };
        h.add(&[id], v).unwrap();
        assert_eq!(walked(&h), before, "add {i}");
        assert_eq!(h.search(v, 1, None, None).unwrap()[0].id, id);
    }
    // The new vectors took new slots; the old ones wait to be cleared.
    assert_eq!((h.graph.slots(), h.free.len(), h.len()), (n + 10, 10, n));
    assert!(all_live_reached(&h));
}

/// Once the freed slots are a share of the graph, the next add clears them
/// all in one pass: no link is left into any of them, none out of them,
/// every live node stays reachable, and adds take them before growing the
/// graph.
#[test]
fn freed_slots_are_cleared_a_share_of_the_graph_at_a_time() {
    use super::reachability::CLEARED_SHARE;
    let dim = 16;
    let n = 3000;
    let (mut h, data, ids) = build(Metric::L2, n, dim);
    let more = clustered(400, dim, 20, 41);
    let new_id = |i: usize| 1_000_000 + i as u64;
    let add = |h: &mut Hnsw, i: usize| h.add(&[new_id(i)], &more[i * dim..][..dim]).unwrap();
    // Under the share of 3,000 slots: kept as they are.
    let under = n.div_ceil(CLEARED_SHARE) - 1;
    h.remove(&ids[..under]).unwrap();
    let before = walked(&h);
    add(&mut h, 0);
    assert_eq!(
        (walked(&h), h.graph.slots(), h.free.len()),
        (before, n + 1, under)
    );
    // The share of 3,001: the next add clears them and takes one.
    let due = (n + 1).div_ceil(CLEARED_SHARE);
    h.remove(&ids[under..due]).unwrap();
    add(&mut h, 1);
    assert!(walked(&h) > before);
    assert_eq!(
        (h.graph.slots(), h.free.len(), h.vacant.len()),
        (n + 1, 0, due - 1)
    );
    let vacant = h.vacant.clone();
    assert_eq!(links_into_any(&h, &vacant), 0);
    assert!(vacant.iter().all(|&s| {
        (0..=h.graph.level(s)).all(|l| {
            let mut links = Vec::new();
            h.graph.read(s, l, &mut links);
            links.is_empty()
        })
    }));
    assert!(!vacant.contains(&h.entry().unwrap().slot));
    assert!(all_live_reached(&h));
    // The vacant slots are taken before the graph grows.
    for i in 2..=due {
        add(&mut h, i);
    }
    assert_eq!((h.graph.slots(), h.vacant.len()), (n + 1, 0));
    let mut live_data = data[due * dim..].to_vec();
    live_data.extend_from_slice(&more[..(due + 1) * dim]);
    let mut live_ids = ids[due..].to_vec();
    live_ids.extend((0..=due).map(new_id));
    let queries = clustered(60, dim, 20, 77);
    let r = mean_recall(&h, &live_data, &live_ids, &queries, None);
    assert!(r >= 0.95, "recall {r}");
}

/// A store that adds, updates and removes forever: its slots stay within
/// 64/63 of its live ids (plus the one being added), and its passes over
/// the whole graph cost a bounded number of nodes per operation whatever its
/// size: a clear walks the graph at most four times (unlinking, three rounds
/// of the reachability pass) once per 1/64 of it freed, the reachability
/// pass of small adds three times once per eighth of it added.
#[test]
fn churn_keeps_slots_bounded_and_whole_graph_passes_amortised() {
    use super::reachability::CLEARED_SHARE;
    let dim = 8;
    for n in [1500, 6000] {
        let data = clustered(3 * n, dim, 20, 5);
        let row = |i: usize| &data[(i % (3 * n)) * dim..][..dim];
        let mut h = Hnsw::new(dim, Metric::L2, Params::default()).unwrap();
        let ids: Vec<u64> = (0..n as u64).collect();
        h.add(&ids, &data[..n * dim]).unwrap();
        let before = walked(&h);
        let mut live: std::collections::VecDeque<u64> = ids.into();
        let mut next = n as u64;
        for step in 0..2 * n {
            if step % 4 == 3 {
                // A new vector for a live id (the record's text changed).
                let id = live[step % live.len()];
                h.add(&[id], row(step + n)).unwrap();
            } else {
                h.remove(&[live.pop_front().unwrap()]).unwrap();
                h.add(&[next], row(next as usize)).unwrap();
                live.push_back(next);
                next += 1;
            }
            assert!(
                (CLEARED_SHARE - 1) * h.graph.slots() <= CLEARED_SHARE * (h.len() + 1),
                "{n}: {} slots for {} live ids at step {step}",
                h.graph.slots(),
                h.len()
            );
        }
        let per_op = (walked(&h) - before) / (2 * n);
        assert!(
            per_op <= 4 * CLEARED_SHARE + 3 * 8,
            "{n}: {per_op} nodes walked per operation"
        );
        h.settle();
        assert!(all_live_reached(&h), "{n}");
    }
}

#[test]
fn re_adding_an_id_replaces_its_vector() {
    let mut h = Hnsw::new(4, Metric::L2, Params::default()).unwrap();
    h.add(&[1, 2], &[0.0, 0.0, 0.0, 1.0, 5.0, 5.0, 5.0, 5.0])
        .unwrap();
    h.add(&[1], &[9.0, 9.0, 9.0, 9.0]).unwrap();
    assert_eq!(h.len(), 2);
    let got = h.search(&[9.0, 9.0, 9.0, 9.0], 1, None, None).unwrap();
    assert_eq!(got[0].id, 1);
    assert_eq!(got[0].distance, 0.0);
}

#[test]
fn save_and_load_round_trip() {
    let (mut h, _, _) = build(Metric::Cosine, 1500, 24);
    h.set_ef(77).unwrap();
    h.remove(&[1, 4, 7]).unwrap();
    let dir = std::env::temp_dir().join(format!("memlane-hnsw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("index.bin");
    h.save(&path).unwrap();
    let g = Hnsw::load(&path).unwrap();
    assert_eq!(g.params().ef, 77);
    assert_eq!(g.len(), h.len());
    let queries = clustered(20, 24, 20, 3);
    let (la, da) = h.search_batch(&queries, 10, None, None).unwrap();
    let (lb, db) = g.search_batch(&queries, 10, None, None).unwrap();
    assert_eq!(la, lb);
    assert_eq!(da, db);

    // Damage anywhere is reported, never a panic.
    let bytes = std::fs::read(&path).unwrap();
    for cut in [0, 10, 40, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        assert!(matches!(Hnsw::load(&path), Err(Error::Corrupt { .. })));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    let mut h = Hnsw::new(3, Metric::Cosine, Params::default()).unwrap();
    h.add(&[1], &[1.0, 0.0, 0.0]).unwrap();
    assert!(matches!(
        h.add(&[2], &[1.0, 0.0]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        h.add(&[2], &[f32::NAN, 0.0, 0.0]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        h.add(&[2], &[0.0, 0.0, 0.0]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        h.add(&[2, 2], &[1.0; 6]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        h.add(&[MISSING], &[1.0; 3]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        h.search(&[1.0, 0.0], 1, None, None),
        Err(Error::DimensionMismatch { .. })
    ));
    assert!(matches!(
        h.search(&[1.0, 0.0, 0.0], 0, None, None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(h.remove(&[1, 99]), Err(Error::UnknownId(99))));
    assert_eq!(h.len(), 1);
    assert!(Hnsw::new(0, Metric::L2, Params::default()).is_err());
}

#[test]
fn short_results_are_padded_in_batches() {
    let mut h = Hnsw::new(2, Metric::L2, Params::default()).unwrap();
    h.add(&[5, 6], &[0.0, 0.0, 1.0, 1.0]).unwrap();
    let (l, d) = h
        .search_batch(&[0.0, 0.0, 1.0, 1.0], 3, None, None)
        .unwrap();
    assert_eq!(l, vec![5, 6, MISSING, 6, 5, MISSING]);
    assert!(d[2].is_infinite() && d[5].is_infinite());
    assert_eq!(h.search(&[0.0, 0.0], 3, None, None).unwrap().len(), 2);
    let empty = Hnsw::new(2, Metric::L2, Params::default()).unwrap();
    assert!(empty.search(&[0.0, 0.0], 3, None, None).unwrap().is_empty());
}

#[test]
fn reduced_precision_keeps_recall_and_round_trips() {
    for precision in [Precision::F16, Precision::Int8, Precision::Int8F16] {
        for metric in [Metric::Cosine, Metric::L2] {
            let data = clustered(3000, 48, 20, 7);
            let ids: Vec<u64> = (0..3000).collect();
            let params = Params {
                precision,
                ..Params::default()
            };
            let mut h = Hnsw::new(48, metric, params).unwrap();
            h.add(&ids, &data).unwrap();
            let queries = clustered(50, 48, 20, 99);
            let r = mean_recall(&h, &data, &ids, &queries, None);
            // int8 distances are approximate: near ties can swap.
            let floor = if precision == Precision::Int8 {
                0.9
            } else {
                0.95
            };
            assert!(r >= floor, "{precision:?} {metric:?}: recall {r}");
            let v = h.vector(5).unwrap();
            let want = &data[5 * 48..6 * 48];
            let scale = if metric == Metric::Cosine {
                1.0 / want.iter().map(|x| x * x).sum::<f32>().sqrt()
            } else {
                1.0
            };
            let tol = if precision == Precision::Int8 {
                0.02
            } else {
                0.005
            };
            for (a, b) in v.iter().zip(want) {
                assert!((a - b * scale).abs() <= tol * (b * scale).abs().max(0.5));
            }
            let dir = std::env::temp_dir()
                .join(format!("memlane-prec-{}-{precision:?}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            h.save(&dir.join("i")).unwrap();
            let g = Hnsw::load(&dir.join("i")).unwrap();
            assert_eq!(g.params().precision, precision);
            let (la, da) = h.search_batch(&queries, 10, None, None).unwrap();
            let (lb, db) = g.search_batch(&queries, 10, None, None).unwrap();
            assert_eq!((la, da), (lb, db));
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

/// Cuts every level-0 link into `victim`, as heuristic pruning can.
fn cut_off(h: &Hnsw, victim: u32) {
    let mut links = Vec::new();
    for s in 0..h.graph.slots() as u32 {
        h.graph.read(s, 0, &mut links);
        if links.contains(&victim) {
            links.retain(|&x| x != victim);
            h.graph.write(s, 0, &links);
        }
    }
}

fn links_into(h: &Hnsw, victim: u32) -> usize {
    let mut links = Vec::new();
    (0..h.graph.slots() as u32)
        .filter(|&s| {
            h.graph.read(s, 0, &mut links);
            links.contains(&victim)
        })
        .count()
}

#[test]
fn cut_off_nodes_are_reconnected() {
    let (h, data, _) = build(Metric::L2, 500, 16);
    let entry = h.entry().unwrap().slot;
    let victim = if entry == 7 { 8 } else { 7 };
    cut_off(&h, victim);
    h.reconnect(&Allowed::new(0, std::iter::empty()));
    assert!(links_into(&h, victim) >= 1);
    let q = &data[victim as usize * 16..(victim as usize + 1) * 16];
    assert_eq!(
        h.search(q, 1, Some(50), None).unwrap()[0].id,
        u64::from(victim) * 3 + 1
    );
}

#[test]
fn a_deferred_reachability_pass_runs_with_the_last_batch_or_before_a_save() {
    let dim = 16;
    let (mut h, _, _) = build(Metric::L2, 2000, dim);
    let victim = if h.entry().unwrap().slot == 7 { 8 } else { 7 };
    let more = clustered(420, dim, 20, 99);
    // Adds rows of `more` as one batch of a backlog (`last`: the batch that
    // empties it); returns whether it ran the pass.
    let add = |h: &mut Hnsw, rows: std::ops::Range<usize>, last: bool| {
        let ids: Vec<u64> = rows.clone().map(|i| 10_000 + i as u64).collect();
        let mut staged = h
            .stage(&ids, &more[rows.start * dim..rows.end * dim])
            .unwrap();
        h.plan_check(&mut staged, !last);
        let checked = staged.check;
        h.link_staged(&staged);
        h.publish(staged);
        checked
    };

    // A batch under an eighth of the graph, with more to come: no pass.
    cut_off(&h, victim);
    assert!(!add(&mut h, 0..100, false));
    assert_eq!(links_into(&h, victim), 0);
    // Saving settles what was put off.
    let dir = std::env::temp_dir().join(format!("memlane-deferred-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    h.save(&dir.join("hnsw.bin")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(links_into(&h, victim) >= 1);
    // Nothing is left put off: a small last batch has no pass to run.
    assert!(!add(&mut h, 100..105, true));

    // Batches put off until those linked since the last pass reach an eighth
    // (300 of 2,400).
    cut_off(&h, victim);
    assert!(!add(&mut h, 105..250, false));
    assert!(add(&mut h, 250..400, false));
    assert!(links_into(&h, victim) >= 1);

    // The last batch of a backlog runs the pass its batches put off, however
    // small (under the size that runs a pass of its own).
    cut_off(&h, victim);
    assert!(!add(&mut h, 400..415, false));
    assert_eq!(links_into(&h, victim), 0);
    assert!(add(&mut h, 415..420, true));
    assert!(links_into(&h, victim) >= 1);
}

#[test]
fn search_where_keeps_only_accepted_live_ids_and_asks_only_about_reached_ones() {
    let (mut h, data, ids) = build(Metric::L2, 2000, 16);
    h.remove(&[4, 7]).unwrap();
    let keep = |id: u64| id.is_multiple_of(2);
    let asked = std::cell::Cell::new(0usize);
    let queries = clustered(30, 16, 20, 99);
    let mut total = 0.0;
    for q in queries.chunks_exact(16) {
        let got = h
            .search_where(q, 10, Some(64), |id| {
                asked.set(asked.get() + 1);
                keep(id)
            })
            .unwrap();
        assert_eq!(got.len(), 10);
        assert!(got.iter().all(|n| keep(n.id) && n.id != 4));
        assert!(got.windows(2).all(|w| w[0].distance <= w[1].distance));
        let want = exact(Metric::L2, &data, &ids, q, 10, |id| keep(id) && id != 4);
        total += recall(&got, &want);
    }
    assert!(total / 30.0 >= 0.9, "recall {}", total / 30.0);
    // A graph search reaches a fraction of the index per query.
    assert!(asked.get() < 30 * 2000 / 2, "asked {}", asked.get());
    // A predicate that searches the same index again still works.
    let q = &queries[..16];
    let nested = h
        .search_where(q, 3, None, |id| {
            h.search_where(q, 1, None, |_| true).unwrap().len() == 1 && keep(id)
        })
        .unwrap();
    assert_eq!(nested.len(), 3);
    // Nothing accepted: an empty result, not an error.
    assert!(h.search_where(q, 5, None, |_| false).unwrap().is_empty());
    assert!(h.search_where(q, 0, None, |_| true).is_err());
    assert!(h.search_where(&q[..3], 1, None, |_| true).is_err());
}

#[test]
fn hidden_ids_leave_searches_and_come_back_as_they_were() {
    let (mut h, data, ids) = build(Metric::L2, 1000, 16);
    let q = |i: usize| &data[i * 16..(i + 1) * 16];
    let slots_before = h.graph.slots();
    h.hide(&[ids[5], ids[6]]).unwrap();
    assert!(!h.contains(ids[5]) && h.len() == 998);
    assert_eq!(h.hidden(), vec![ids[5], ids[6]]);
    assert!(h
        .search(q(5), 10, None, None)
        .unwrap()
        .iter()
        .all(|n| n.id != ids[5]));
    assert!(h.hide(&[ids[5]]).is_err(), "already hidden");
    assert!(h.unhide(&[ids[7]]).is_err(), "not hidden");
    // Adds of new ids do not take hidden slots.
    h.add(&[50_000], q(900)).unwrap();
    assert_eq!(h.graph.slots(), slots_before + 1);
    // Snapshots keep hidden ids hidden.
    let dir = std::env::temp_dir().join(format!("memlane-hidden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    h.save(&dir.join("i")).unwrap();
    let mut g = Hnsw::load(&dir.join("i")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(g.hidden(), vec![ids[5], ids[6]]);
    g.unhide(&[ids[5]]).unwrap();
    let top = g.search(q(5), 1, None, None).unwrap();
    assert_eq!((top[0].id, top[0].distance), (ids[5], 0.0));
    assert_eq!(g.vector(ids[5]).unwrap(), q(5));
    // Adding a hidden id shows it with the new vector.
    g.add(&[ids[6]], q(800)).unwrap();
    assert_eq!(g.vector(ids[6]).unwrap(), q(800));
    assert!(g.hidden().is_empty());
    // Released ids free their slots for the next adds.
    g.hide(&[ids[1], ids[2]]).unwrap();
    g.release(&[ids[1], ids[2]]).unwrap();
    let before = g.graph.slots();
    g.add(&[60_000, 60_001], &data[..32]).unwrap();
    assert_eq!(g.graph.slots(), before);
    assert!(g.hidden().is_empty() && !g.contains(ids[1]));
    let mean = mean_recall(&g, &data, &ids, &clustered(20, 16, 20, 5), None);
    assert!(mean > 0.8, "recall {mean}");
}

#[test]
fn vectors_whose_norm_leaves_f32_are_refused() {
    // 1e-45 everywhere: finite and non-zero, but the norm is subnormal and its
    // reciprocal overflows, so the unit vector would be all infinities.
    let tiny = vec![1e-45f32; 384];
    let huge = vec![1e38f32; 384];
    let mut h = Hnsw::new(384, Metric::Cosine, Params::default()).unwrap();
    for v in [&tiny, &huge] {
        assert!(matches!(h.add(&[1], v), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            h.search(v, 1, None, None),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert_eq!(h.len(), 0);
    let mut ok = vec![0f32; 384];
    ok[0] = 1e-30;
    h.add(&[2], &ok).unwrap();
    assert_eq!(h.search(&ok, 1, None, None).unwrap()[0].id, 2);
    assert!(h.vector(2).unwrap().iter().all(|x| x.is_finite()));
    // Stored as given: a norm whose squared distances would overflow is refused.
    for metric in [Metric::L2, Metric::InnerProduct] {
        let mut h = Hnsw::new(384, metric, Params::default()).unwrap();
        assert!(matches!(h.add(&[1], &huge), Err(Error::InvalidArgument(_))));
        h.add(&[1], &tiny).unwrap();
        h.add(&[2], &vec![0f32; 384]).unwrap();
    }
}

#[test]
fn distances_are_the_ones_search_reports() {
    for precision in [
        Precision::F32,
        Precision::F16,
        Precision::Int8,
        Precision::Int8F16,
    ] {
        let params = Params {
            precision,
            ..Params::default()
        };
        let (dim, n) = (24, 300);
        let data = clustered(n, dim, 6, 7);
        let ids: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
        let mut h = Hnsw::new(dim, Metric::Cosine, params).unwrap();
        h.add(&ids, &data).unwrap();
        let q = &data[5 * dim..6 * dim];
        let found = h.search(q, 20, Some(100), None).unwrap();
        let asked: Vec<u64> = found.iter().map(|nb| nb.id).chain([2]).collect();
        let got = h.distances(q, &asked).unwrap();
        for (nb, d) in found.iter().zip(&got) {
            assert_eq!(Some(nb.distance), *d, "{precision:?}");
        }
        assert_eq!(got.last(), Some(&None)); // 2 is not an id of the index
    }
}

fn unit(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    v.iter().map(|x| (f64::from(*x) / norm) as f32).collect()
}

#[test]
fn f32_indexes_walk_int8_copies_but_report_exact_distances() {
    for metric in [Metric::Cosine, Metric::InnerProduct, Metric::L2] {
        let (dim, n) = (40, 2000);
        let (h, data, ids) = build(metric, n, dim);
        assert_eq!(h.params().precision, Precision::F32);
        assert_eq!(h.rank.is_some(), metric != Metric::L2, "{metric:?}");
        // The stored floats are the ones given (normalised under cosine).
        for row in [0, 17, n - 1] {
            let want = &data[row * dim..(row + 1) * dim];
            let got = h.vector(ids[row]).unwrap();
            if metric == Metric::Cosine {
                for (a, b) in got.iter().zip(unit(want)) {
                    assert!((a - b).abs() <= 1e-6);
                }
            } else {
                assert_eq!(got, want);
            }
        }
        let queries = clustered(30, dim, 20, 5);
        for q in queries.chunks_exact(dim) {
            let qv = if metric == Metric::Cosine {
                unit(q)
            } else {
                q.to_vec()
            };
            let found = h.search(q, 10, Some(40), None).unwrap();
            assert_eq!(found.len(), 10);
            for nb in &found {
                // int8 distances are off by about 1e-3; the floats' by 1e-7.
                let want = super::distance::reference(metric, &qv, &h.vector(nb.id).unwrap());
                let tol = 1e-6 * want.abs().max(1.0);
                assert!(
                    (f64::from(nb.distance) - want).abs() <= tol,
                    "{metric:?}: {} vs {want}",
                    nb.distance
                );
            }
            assert!(found.windows(2).all(|w| w[0].distance <= w[1].distance));
        }
    }
}

#[test]
fn int8_walk_copies_keep_the_recall_of_walking_the_floats() {
    let (dim, n) = (48, 4000);
    let data = clustered(n, dim, 20, 7);
    let ids: Vec<u64> = (0..n as u64).collect();
    let queries = clustered(200, dim, 20, 11);
    let mut recalls = Vec::new();
    for walk in [false, true] {
        let mut h = Hnsw::with_walk(dim, Metric::Cosine, Params::default(), walk).unwrap();
        assert_eq!(h.rank.is_some(), walk);
        h.add(&ids, &data).unwrap();
        let mut total = 0.0;
        for ef in [10, 16, 40] {
            h.set_ef(ef).unwrap();
            total += mean_recall(&h, &data, &ids, &queries, None);
        }
        recalls.push(total / 3.0);
    }
    let (floats, int8) = (recalls[0], recalls[1]);
    assert!(
        int8 >= floats - 0.01,
        "walking int8: {int8}, the floats: {floats}"
    );
}

/// A version 1 snapshot, written while int8 records held their parameters
/// after the codes (by commit 7791384, through the Python API: 120 vectors
/// of 20 dims around 4 centres, cosine, int8+f16, m = 4, ef_construction =
/// 20, ids 7, 14, ..., 840, then id 14 removed). It loads, its codes made
/// again from the f16 copies, and saves as version 2, without them.
#[test]
fn an_int8_f16_snapshot_of_version_1_loads_and_saves_without_codes() {
    let old = include_bytes!("testdata/int8f16_cosine_v1.bin");
    let (h, saved) = with_old_snapshot("int8", old, |h| {
        assert_eq!(h.len(), 119);
        assert_eq!(h.params().precision, Precision::Int8F16);
        assert!(!h.contains(14) && h.contains(7) && h.contains(840));
        // Every stored vector is found first, at distance ~0: the codes and
        // their parameters were read back in place.
        for id in h.ids() {
            let v = h.vector(id).unwrap();
            let found = h.search(&v, 1, Some(64), None).unwrap();
            assert_eq!(found[0].id, id);
            assert!(found[0].distance.abs() < 1e-3);
        }
    });
    // Each of the 120 slots lost the line of its 20 codes and their grid,
    // and gained the byte that says its vector follows.
    assert_eq!(old.len() - 28 - saved.len(), 120 * (64 - 1));
    let again = super::snapshot::decode(&saved, VERSION).unwrap();
    assert_same_index(&h, &again);
}

/// Asserts that two indexes hold the same graph, vectors and int8 codes.
fn assert_same_index(a: &Hnsw, b: &Hnsw) {
    assert_eq!((a.labels.clone(), a.ids()), (b.labels.clone(), b.ids()));
    for slot in 0..a.labels.len() as u32 {
        assert_eq!(a.vectors.get(slot), b.vectors.get(slot), "codes of {slot}");
        assert_eq!(a.vectors.rank(slot), b.vectors.rank(slot));
        if a.vectors.params_apart() {
            assert_eq!(a.vectors.walk_params(slot), b.vectors.walk_params(slot));
        }
        for l in 0..=a.graph.level(slot) {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            a.graph.read(slot, l, &mut x);
            b.graph.read(slot, l, &mut y);
            assert_eq!(x, y);
        }
    }
}

/// A version 2 snapshot of an `int8+f16` index holds the f16 copies but not
/// the codes; the loaded index makes the very codes the saved one had, and
/// answers every search the same.
#[test]
fn an_int8_f16_snapshot_makes_the_same_codes_again() {
    let (dim, n) = (40, 3000);
    let data = clustered(n, dim, 12, 5);
    let ids: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
    let params = Params {
        precision: Precision::Int8F16,
        ..Params::default()
    };
    let mut h = Hnsw::new(dim, Metric::Cosine, params).unwrap();
    h.add(&ids, &data).unwrap();
    h.remove(&ids[..50]).unwrap();
    let dir = std::env::temp_dir().join(format!("memlane-v2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("h.bin");
    h.save(&path).unwrap();
    let file = std::fs::read(&path).unwrap();
    assert_eq!(file[12..16], VERSION.to_le_bytes());
    let loaded = Hnsw::load(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_same_index(&h, &loaded);
    let queries = clustered(100, dim, 12, 9);
    for q in queries.chunks_exact(dim) {
        assert_eq!(
            h.search(q, 10, None, None).unwrap(),
            loaded.search(q, 10, None, None).unwrap()
        );
    }
}

/// Loads the version 1 snapshot `old` from a file, runs `check` on the
/// index, and saves it again; returns the index and the payload saved, in
/// the current version.
fn with_old_snapshot(name: &str, old: &[u8], check: impl FnOnce(&Hnsw)) -> (Hnsw, Vec<u8>) {
    assert_eq!(old[12..16], 1u32.to_le_bytes());
    let dir = std::env::temp_dir().join(format!("memlane-old-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("old.bin");
    std::fs::write(&path, old).unwrap();
    let h = Hnsw::load(&path).unwrap();
    check(&h);
    let again = dir.join("again.bin");
    h.save(&again).unwrap();
    let saved = std::fs::read(&again).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(saved[12..16], VERSION.to_le_bytes());
    (h, saved[28..].to_vec())
}

/// A snapshot written before f32 indexes kept int8 walk copies (by commit
/// 49b0d34, through the Python API: 120 vectors of 20 dims around 4 centres,
/// cosine, m = 4, ef_construction = 20, ids 7, 14, ..., 840, then id 14
/// removed). Its payload is the current one but for the flag before each
/// vector: the copies are derived on load.
#[test]
fn an_f32_snapshot_from_before_int8_walk_copies_loads_and_saves_the_same_index() {
    let old = include_bytes!("testdata/f32_cosine_v1.bin");
    let (h, saved) = with_old_snapshot("f32", old, |h| {
        assert_eq!(h.len(), 119);
        assert_eq!((h.dim(), h.metric()), (20, Metric::Cosine));
        assert_eq!(h.params().precision, Precision::F32);
        assert!(
            h.rank.is_some(),
            "loaded f32 cosine indexes walk int8 copies"
        );
        assert!(!h.contains(14) && h.contains(7) && h.contains(840));
        // Searches find the exact neighbours among the stored floats, at their
        // exact distances.
        let ids = h.ids();
        let stored: Vec<Vec<f32>> = ids.iter().map(|&id| h.vector(id).unwrap()).collect();
        for (qi, q) in stored.iter().enumerate().step_by(7) {
            let mut want: Vec<(f64, u64)> = stored
                .iter()
                .zip(&ids)
                .map(|(v, &id)| (super::distance::reference(Metric::Cosine, q, v), id))
                .collect();
            want.sort_by(|a, b| a.0.total_cmp(&b.0));
            let found = h.search(q, 5, Some(119), None).unwrap();
            assert_eq!(found[0].id, ids[qi]);
            for (nb, (d, _)) in found.iter().zip(&want) {
                assert!((f64::from(nb.distance) - d).abs() <= 1e-6);
            }
        }
    });
    // The same bytes but for a flag before each of the 120 slots' vectors.
    assert_eq!(saved.len(), old.len() - 28 + 120);
    assert_same_index(&h, &super::snapshot::decode(&saved, VERSION).unwrap());
}

#[test]
fn f32_batches_are_scaled_where_they_are_stored_without_a_copy() {
    let dim = 24;
    let data = clustered(300, dim, 6, 7);
    let ids: Vec<u64> = (0..300).collect();
    for (precision, metric) in [
        (Precision::F32, Metric::Cosine),
        (Precision::F32, Metric::L2),
        (Precision::F16, Metric::Cosine),
    ] {
        let params = Params {
            precision,
            ..Params::default()
        };
        let mut h = Hnsw::new(dim, metric, params).unwrap();
        let staged = h.stage(&ids, &data).unwrap();
        assert_eq!(staged.data.is_empty(), precision == Precision::F32);
        h.link_staged(&staged);
        h.publish(staged);
        if precision != Precision::F32 {
            continue;
        }
        // The very floats a checked copy would have held.
        let want = check_rows(&data, dim, metric == Metric::Cosine, "vector").unwrap();
        for (row, &id) in ids.iter().enumerate() {
            assert_eq!(h.vector(id).unwrap(), &want[row * dim..(row + 1) * dim]);
        }
        let queries = clustered(20, dim, 6, 9);
        assert!(mean_recall(&h, &data, &ids, &queries, None) >= 0.95);
    }
    // Still all checked before anything is stored.
    let mut h = Hnsw::new(dim, Metric::Cosine, Params::default()).unwrap();
    let mut bad = data[..3 * dim].to_vec();
    bad[2 * dim + 5] = f32::INFINITY;
    assert!(matches!(
        h.add(&[1, 2, 3], &bad),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!((h.len(), h.graph.slots()), (0, 0));
}

/// Under ip, vectors are stored as given, up to norms of [`MAX_RAW_NORM`]:
/// the int8 walk's formula must stay finite there, and results exact.
#[test]
fn f32_ip_walks_vectors_near_the_largest_norm() {
    for dim in [32, 384] {
        let raw = clustered(1000, dim, 10, 7);
        let top = raw
            .chunks_exact(dim)
            .map(|v| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt())
            .fold(0.0, f64::max);
        let scale = (0.99 * MAX_RAW_NORM / top) as f32;
        let data: Vec<f32> = raw.iter().map(|x| x * scale).collect();
        let ids: Vec<u64> = (0..1000).collect();
        let mut h = Hnsw::new(dim, Metric::InnerProduct, Params::default()).unwrap();
        h.add(&ids, &data).unwrap();
        let queries: Vec<f32> = clustered(20, dim, 10, 9)
            .iter()
            .map(|x| x * scale)
            .collect();
        let r = mean_recall(&h, &data, &ids, &queries, None);
        assert!(r >= 0.95, "dim {dim}: recall {r}");
        for q in queries.chunks_exact(dim) {
            for nb in h.search(q, 10, None, None).unwrap() {
                let want =
                    super::distance::reference(Metric::InnerProduct, q, &h.vector(nb.id).unwrap());
                assert!(nb.distance.is_finite());
                assert!((f64::from(nb.distance) - want).abs() <= 1e-5 * want.abs());
            }
        }
    }
}

/// Which nodes a walk along level-0 links from `slot` reaches.
fn reached_from(h: &Hnsw, slot: u32) -> Vec<bool> {
    let mut seen = vec![false; h.graph.slots()];
    let mut stack = vec![slot];
    seen[slot as usize] = true;
    while let Some(s) = stack.pop() {
        h.graph.for_each(s, 0, |x| {
            if !seen[x as usize] {
                seen[x as usize] = true;
                stack.push(x);
            }
        });
    }
    seen
}

#[test]
fn a_node_added_alone_keeps_a_link_in_when_its_neighbours_prune_it() {
    // Under `ip` a vector of small norm is far from everything, so each
    // neighbour it links to drops the link back; in a graph too large for
    // a pass after every add, it must still get a link in.
    let dim = 16;
    let n = 3000;
    let data = clustered(n, dim, 20, 11);
    let ids: Vec<u64> = (0..n as u64).collect();
    let mut h = Hnsw::new(dim, Metric::InnerProduct, Params::default()).unwrap();
    h.add(&ids, &data).unwrap();
    for (i, id) in (n as u64..n as u64 + 20).enumerate() {
        let small: Vec<f32> = data[i * dim..(i + 1) * dim]
            .iter()
            .map(|x| x * 1e-3)
            .collect();
        h.add(&[id], &small).unwrap();
        let slot = h.slots[&id];
        let entry = h.entry().unwrap().slot;
        assert!(reached_from(&h, entry)[slot as usize], "id {id}");
    }
}

/// How many nodes a walk along level-0 links from `slot` reaches.
fn reach_from(h: &Hnsw, slot: u32) -> usize {
    let mut seen = vec![false; h.graph.slots()];
    let mut stack = vec![slot];
    seen[slot as usize] = true;
    let mut n = 0;
    while let Some(s) = stack.pop() {
        n += 1;
        h.graph.for_each(s, 0, |x| {
            if !seen[x as usize] {
                seen[x as usize] = true;
                stack.push(x);
            }
        });
    }
    n
}

#[test]
fn exact_duplicates_keep_links_beyond_each_other() {
    // Agents store the same text again and again ("ok", "thanks"), so the
    // same vector: the heuristic compared quantized distances that tie in
    // exact arithmetic, and a copy, being as near as the node itself, pruned
    // every other candidate. The copies' lists then held only each other: a
    // search that came down on one (ef 200, 14 nodes) found the copies and
    // nothing else.
    let dim = 16;
    for precision in [Precision::F32, Precision::Int8F16] {
        let data = clustered(2000, dim, 20, 3);
        let copy = data[5 * dim..6 * dim].to_vec();
        let params = Params {
            precision,
            ..Params::default()
        };
        let mut h = Hnsw::new(dim, Metric::Cosine, params).unwrap();
        let ids: Vec<u64> = (0..2000).collect();
        h.add(&ids, &data).unwrap();
        // Copies come alone and in batches, and one id is stored again.
        let mut all_data = data.clone();
        let mut all_ids = ids.clone();
        for (first, n) in [
            (10_000u64, 1usize),
            (10_001, 1),
            (10_002, 8),
            (10_010, 30),
            (5, 1),
        ] {
            let batch: Vec<u64> = (first..first + n as u64).collect();
            let vectors: Vec<f32> = copy.iter().copied().cycle().take(n * dim).collect();
            h.add(&batch, &vectors).unwrap();
            for &id in &batch {
                if id != 5 {
                    all_ids.push(id);
                    all_data.extend_from_slice(&copy);
                }
            }
        }
        // Every copy leads to (nearly) the whole graph.
        let live = h.len();
        for id in [5, 10_000, 10_001, 10_005, 10_020] {
            let slot = h.slots[&id];
            assert!(
                reach_from(&h, slot) * 100 >= live * 99,
                "{precision:?}: id {id}"
            );
        }
        // And a search near the copies finds them and the nearest others.
        let want = exact(Metric::Cosine, &all_data, &all_ids, &copy, 60, |_| true);
        let got = h.search(&copy, 60, Some(200), None).unwrap();
        assert!(
            recall(&got, &want) >= 0.95,
            "{precision:?}: {}",
            recall(&got, &want)
        );
    }
}

/// Batches below the parallel threshold link on one thread, so two indexes
/// given the same adds are the same graph.
#[test]
fn buffers_grown_beside_the_index_give_the_same_index() {
    let (n, dim, batch) = (1200, 24, 40);
    let data = clustered(n, dim, 20, 11);
    let queries = clustered(30, dim, 20, 12);
    for precision in [Precision::F32, Precision::Int8F16] {
        let params = Params {
            precision,
            ..Params::default()
        };
        let mut plain = Hnsw::new(dim, Metric::Cosine, params).unwrap();
        let mut grown = Hnsw::new(dim, Metric::Cosine, params).unwrap();
        let (mut copied, mut dropped) = (0, 0);
        for (b, rows) in data.chunks(batch * dim).enumerate() {
            let ids: Vec<u64> = (0..rows.len() / dim)
                .map(|i| (b * batch + i) as u64)
                .collect();
            // Every fifth batch comes in two adds, and its copy is offered
            // after the first: stale by then, so it must be dropped (taken, it
            // would lose the first add's vector).
            let split = if b % 5 == 4 { 1 } else { 0 };
            let g = grown.grown(ids.len());
            copied += usize::from(g.level0.is_some());
            if split > 0 {
                plain.add(&ids[..split], &rows[..split * dim]).unwrap();
                grown.add(&ids[..split], &rows[..split * dim]).unwrap();
                dropped += usize::from(g.level0.is_some());
            }
            grown.adopt(g);
            plain.add(&ids[split..], &rows[split * dim..]).unwrap();
            grown.add(&ids[split..], &rows[split * dim..]).unwrap();
        }
        assert!(
            copied > 3 && dropped > 0,
            "{copied} copied, {dropped} dropped"
        );
        let (la, da) = plain.search_batch(&queries, 10, None, None).unwrap();
        let (lb, db) = grown.search_batch(&queries, 10, None, None).unwrap();
        assert_eq!((la, da), (lb, db), "{precision:?}");
    }
}

#[test]
fn nothing_is_copied_while_a_batch_links_and_a_stale_copy_is_dropped() {
    let (mut h, data, _) = build(Metric::Cosine, 300, 16);
    let extra = clustered(50, 16, 20, 5);
    let ids: Vec<u64> = (10_000..10_050).collect();
    let staged = h.stage(&ids, &extra).unwrap();
    let g = h.grown(100_000);
    assert!(g.level0.is_none() && g.vectors.is_empty());
    h.link_staged(&staged);
    h.publish(staged);
    let before = h.grown(100_000);
    assert!(before.level0.is_some() && !before.vectors.is_empty());
    h.add(&[20_000], &data[..16]).unwrap();
    h.adopt(before); // stale: dropped
    assert_eq!(h.len(), 351);
    // The copy of the first vector added last is found beside it (the stale
    // buffers would have lost its vector and links).
    let hits = h.search(&data[..16], 2, None, None).unwrap();
    let mut ids: Vec<u64> = hits.iter().map(|n| n.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 20_000]);
}

const PRECISIONS: [Precision; 4] = [
    Precision::F32,
    Precision::F16,
    Precision::Int8,
    Precision::Int8F16,
];

/// A temporary file path, unique to this process and `name`.
fn temp_file(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("memlane-{name}-{}.bin", std::process::id()))
}

/// An index of `n` clustered vectors of `dim` (ids `2i + 1`), then its
/// first `removed` ids removed; returns it with its data and ids.
fn routed(
    precision: Precision,
    n: usize,
    dim: usize,
    removed: usize,
) -> (Hnsw, Vec<f32>, Vec<u64>) {
    let data = clustered(n, dim, 6, 3);
    let ids: Vec<u64> = (0..n as u64).map(|i| 2 * i + 1).collect();
    let params = Params {
        precision,
        m: 6,
        ef_construction: 40,
        ..Params::default()
    };
    let mut h = Hnsw::new(dim, Metric::Cosine, params).unwrap();
    h.add(&ids, &data).unwrap();
    h.remove(&ids[..removed]).unwrap();
    (h, data, ids)
}

/// An engine's snapshot (`save_routing`) holds the links and the vectors of
/// removed slots, not the live ones; the loaded index refuses searches until
/// `fill` gives those back (in chunks, ignoring what it does not await), and
/// is then the index saved, codes included.
#[test]
fn a_routing_snapshot_filled_again_is_the_index_saved() {
    let (n, dim, removed) = (400, 24, 30);
    for precision in PRECISIONS {
        let (h, data, ids) = routed(precision, n, dim, removed);
        let (full, routing) = (temp_file("full"), temp_file("routing"));
        h.save(&full).unwrap();
        h.save_routing(&routing).unwrap();
        let size = |p: &std::path::Path| std::fs::metadata(p).unwrap().len() as usize;
        // Each live slot's vector and its length prefix are left out.
        let record = h.vectors.saved_bytes(VERSION) + 8;
        assert_eq!(size(&full) - size(&routing), (n - removed) * record);
        let mut loaded = Hnsw::load_routing(&routing).unwrap();
        assert!(matches!(Hnsw::load(&routing), Err(Error::Corrupt { .. })));
        assert_same_index(&h, &Hnsw::load(&full).unwrap());
        std::fs::remove_file(&full).unwrap();
        std::fs::remove_file(&routing).unwrap();
        assert_eq!(loaded.awaiting(), h.ids());
        assert!(loaded.search(&data[..dim], 5, None, None).is_err());
        assert!(loaded.vector(ids[removed]).is_err());
        // The first half, with an unknown id and a removed one (whose vector
        // is in the file): both ignored.
        let half = n / 2;
        let mut some: Vec<u64> = ids[..half].to_vec();
        some.push(1_000_000);
        let mut rows = data[..half * dim].to_vec();
        rows.extend_from_slice(&data[..dim]);
        loaded.fill(&some, &rows).unwrap();
        assert_eq!(loaded.awaiting(), &ids[half..]);
        // The rest, with a row given twice: refused, changing nothing.
        let twice = [ids[half], ids[half]];
        assert!(loaded.fill(&twice, &data[..2 * dim]).is_err());
        assert!(loaded.fill(&ids[half..], &data[..dim]).is_err());
        loaded.fill(&ids[half..], &data[half * dim..]).unwrap();
        assert!(loaded.awaiting().is_empty() && loaded.missing.is_empty());
        assert_same_index(&h, &loaded);
        for q in clustered(30, dim, 6, 11).chunks_exact(dim) {
            assert_eq!(
                h.search(q, 10, None, None).unwrap(),
                loaded.search(q, 10, None, None).unwrap(),
                "{precision:?}"
            );
        }
    }
}

/// A slot whose id is removed before its vector came back (a row deleted
/// after the snapshot) reads as zeros, orthogonal to every query: searches
/// route through it at distance 1, never NaN, never return it, and an add
/// reuses it.
#[test]
fn a_slot_removed_while_its_vector_is_missing_routes_as_orthogonal_and_is_reused() {
    let (n, dim) = (300, 16);
    for precision in PRECISIONS {
        let (h, data, ids) = routed(precision, n, dim, 0);
        let path = temp_file("orthogonal");
        h.save_routing(&path).unwrap();
        let mut loaded = Hnsw::load_routing(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let gone = [ids[5], ids[6]];
        let gone_slots = gone.map(|id| loaded.slots[&id]);
        loaded.remove(&gone).unwrap();
        loaded.fill(&ids, &data).unwrap();
        assert!(loaded.awaiting().is_empty());
        let mut v = Vec::new();
        for &slot in &gone_slots {
            loaded.vectors.decode(slot, &mut v);
            assert!(v.iter().all(|&x| x == 0.0));
            let q = super::distance::Query::padded(&data[..dim], loaded.vectors.padded_dim());
            loaded.each_rank_dist(&q, &[slot], |_, d| assert_eq!(d, 1.0));
            let x = loaded.vectors.get(slot);
            let walked = if loaded.vectors.params_apart() {
                loaded
                    .dist
                    .eval_with(&q, x, loaded.vectors.walk_params(slot))
            } else {
                loaded.dist.eval(&q, x)
            };
            assert_eq!(walked, 1.0);
        }
        for q in clustered(40, dim, 6, 13).chunks_exact(dim) {
            for nb in loaded.search(q, 20, Some(100), None).unwrap() {
                assert!(!gone.contains(&nb.id) && nb.distance.is_finite());
            }
        }
        // The next add takes a freed slot and stores its vector over the zeros.
        let slots = loaded.graph.slots();
        loaded.add(&[9_999], &data[..dim]).unwrap();
        assert_eq!(loaded.graph.slots(), slots);
        let found = loaded.search(&data[..dim], 2, None, None).unwrap();
        assert!(found.iter().any(|nb| nb.id == 9_999));
        // Saved again (all vectors), the zeros of the other slot come back as they are.
        let again = temp_file("orthogonal-again");
        loaded.save(&again).unwrap();
        let back = Hnsw::load(&again).unwrap();
        std::fs::remove_file(&again).unwrap();
        assert_same_index(&loaded, &back);
    }
}

/// What `Hnsw::save` wrote as version 2: each slot's vector without the flag
/// that says it follows.
fn encode_v2(h: &Hnsw) -> Vec<u8> {
    use crate::codec::Writer;
    let mut w = Writer::with_capacity(1 << 16);
    w.u8(h.metric.code());
    w.u8(h.vectors.precision().code());
    for v in [h.dim(), h.m, h.ef_construction, h.ef] {
        w.u64(v as u64);
    }
    w.u64(h.seed);
    w.u64(h.rng);
    w.u64(h.entry.load(Ordering::Acquire));
    w.u64s(&h.labels);
    w.bytes(&h.removed.iter().map(|&r| u8::from(r)).collect::<Vec<_>>());
    w.bytes(h.graph.levels());
    let free: Vec<u32> = h.vacant.iter().chain(&h.free).copied().collect();
    w.u32s(&free);
    let (mut record, mut links) = (Vec::new(), Vec::new());
    for slot in 0..h.graph.slots() as u32 {
        record.clear();
        h.vectors.save_slot(slot, &mut record);
        w.bytes(&record);
        for l in 0..=h.graph.level(slot) {
            h.graph.read(slot, l, &mut links);
            w.u32s(&links);
        }
    }
    w.into_inner()
}

/// A version 2 file (every vector, no flags) still loads, awaiting nothing.
#[test]
fn a_version_2_snapshot_still_loads_whole() {
    for precision in PRECISIONS {
        let (h, data, _) = routed(precision, 200, 16, 20);
        let path = temp_file("v2");
        crate::persist::save(&path, super::snapshot::KIND, 2, &encode_v2(&h)).unwrap();
        let loaded = Hnsw::load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(loaded.awaiting().is_empty() && loaded.missing.is_empty());
        assert_same_index(&h, &loaded);
        assert_eq!(
            h.search(&data[..16], 10, None, None).unwrap(),
            loaded.search(&data[..16], 10, None, None).unwrap()
        );
    }
}

/// A version 3 payload damaged anywhere (a flag of 0, 1 or 2 at every byte,
/// each byte cut off) decodes to an error or to an index that can be
/// filled, searched, added to and removed from without reading out of
/// bounds, as the fuzz target uses it.
#[test]
fn a_damaged_version_3_payload_never_reads_out_of_bounds() {
    let (dim, n) = (8, 24);
    let (h, data, ids) = routed(Precision::Int8F16, n, dim, 4);
    let path = temp_file("damaged");
    h.save_routing(&path).unwrap();
    let payload = std::fs::read(&path).unwrap()[28..].to_vec();
    std::fs::remove_file(&path).unwrap();
    assert!(super::snapshot::decode(&payload, VERSION).is_ok());
    let use_it = |mut h: Hnsw| {
        let _ = h.fill(&ids, &data);
        let _ = h.search(&data[..dim], 5, None, None);
        let _ = h.add(&[1 << 40], &data[..dim]);
        let _ = h.remove(&[ids[10]]);
        let _ = h.search(&data[..dim], 5, None, None);
    };
    for at in 0..payload.len() {
        for b in [0, 1, 2] {
            let mut bad = payload.clone();
            bad[at] = b;
            if let Ok(h) = super::snapshot::decode(&bad, VERSION) {
                use_it(h);
            }
        }
        if let Ok(h) = super::snapshot::decode(&payload[..at], VERSION) {
            use_it(h);
        }
    }
    // A flag other than 0 or 1 is refused. Slot 0's follows the header
    // (metric, precision, six u64s, the entry), the labels, the removed and
    // level bytes and the free list, each list after its u64 length.
    let first_flag =
        2 + 7 * 8 + (8 + 8 * n) + 2 * (8 + n) + (8 + 4 * (h.vacant.len() + h.free.len()));
    assert_eq!(payload[first_flag], u8::from(h.removed[0]));
    let mut bad = payload.clone();
    bad[first_flag] = 2;
    let err = super::snapshot::decode(&bad, VERSION).err().unwrap();
    assert!(err.0.contains("vector flag"), "{}", err.0);
}
