//! Single-thread HNSW search speed and recall on clustered 384-d data, and the
//! distance kernels against the portable version. No Python involved:
//! `cargo bench -p memlane-core --bench hnsw_search [-- N]`.

use std::time::Instant;

use memlane_core::hnsw::{Hnsw, Metric, Params};

fn clustered(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let mut c = 0x1234_5678u64;
    let mut crnd = move || {
        c ^= c << 13;
        c ^= c >> 7;
        c ^= c << 17;
        (c >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let centres: Vec<f32> = (0..200 * dim).map(|_| crnd()).collect();
    let mut out = Vec::with_capacity(n * dim);
    for i in 0..n {
        let k = (i * 7919) % 200;
        out.extend(
            centres[k * dim..(k + 1) * dim]
                .iter()
                .map(|x| x + 0.6 * rnd()),
        );
    }
    out
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000);
    let (dim, nq, k) = (384, 500, 10);
    let data = clustered(n, dim, 7);
    let queries = clustered(nq, dim, 99);
    let ids: Vec<u64> = (0..n as u64).collect();

    let t = Instant::now();
    let mut h = Hnsw::new(dim, Metric::Cosine, Params::default()).expect("params");
    h.add(&ids, &data).expect("add");
    println!("build {n} x {dim}: {:.2} s", t.elapsed().as_secs_f64());

    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let truth: Vec<Vec<u64>> = queries
        .chunks_exact(dim)
        .map(|q| {
            let qn = norm(q);
            let mut d: Vec<(f32, u64)> = data
                .chunks_exact(dim)
                .zip(&ids)
                .map(|(v, &id)| {
                    (
                        -v.iter().zip(q).map(|(a, b)| a * b).sum::<f32>() / (norm(v) * qn),
                        id,
                    )
                })
                .collect();
            d.select_nth_unstable_by(k, |a, b| a.0.total_cmp(&b.0));
            d[..k].iter().map(|x| x.1).collect()
        })
        .collect();

    for ef in [16, 32, 64, 128] {
        let mut best = f64::INFINITY;
        let mut hits = 0;
        for _ in 0..3 {
            hits = 0;
            let t = Instant::now();
            for (q, want) in queries.chunks_exact(dim).zip(&truth) {
                let got = h.search(q, k, Some(ef), None).expect("search");
                hits += got.iter().filter(|g| want.contains(&g.id)).count();
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "ef {ef:>3}: recall@10 {:.3}  {:>8.0} QPS  {:>6.1} us/query",
            hits as f64 / (nq * k) as f64,
            nq as f64 / best,
            best / nq as f64 * 1e6
        );
    }

    // A user's search follows the embedder's run, which streams its weights
    // (23 MB for the default model) through the caches: each query here
    // follows a read of 48 MB, and the median of the searches alone is kept.
    let flush = vec![1u64; 6 << 20];
    let mut times = Vec::with_capacity(nq);
    let mut sink = 0u64;
    for q in queries.chunks_exact(dim) {
        sink = sink.wrapping_add(flush.iter().step_by(8).fold(0, |a, &x| a ^ x));
        let t = Instant::now();
        let got = h.search(q, k, None, None).expect("search");
        times.push(t.elapsed().as_secs_f64());
        sink = sink.wrapping_add(got.len() as u64);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "default ef after 48 MB read: median {:.1} us/query ({sink})",
        times[nq / 2] * 1e6
    );
}
