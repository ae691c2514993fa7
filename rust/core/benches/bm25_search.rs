//! BM25 speed on synthetic Zipf-distributed text, with no Python and no data
//! files: indexing throughput, query latency of MaxScore against exhaustive
//! scoring (k = 10), and the latency of adding and removing one document.
//! Two shapes: many short documents (like WordNet glosses or chat messages)
//! and fewer long ones (like SciFact abstracts).
//! `cargo bench -p memlane-core --bench bm25_search [-- SCALE]` (SCALE
//! multiplies the document counts; default 1).

use std::time::Instant;

use memlane_core::bm25::Bm25Index;

/// xorshift64: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A word drawn from a Zipf(1) law over `vocab` words.
    fn word(&mut self, vocab: u64) -> String {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        let rank = ((vocab as f64).powf(u) as u64).min(vocab - 1);
        format!("w{rank}")
    }

    fn text(&mut self, vocab: u64, words: u64) -> String {
        let n = words / 2 + self.next() % words;
        (0..n)
            .map(|_| self.word(vocab))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn micros(seconds: f64, n: usize) -> f64 {
    seconds * 1e6 / n as f64
}

fn run(name: &str, docs: usize, words: u64, vocab: u64) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let texts: Vec<String> = (0..docs).map(|_| rng.text(vocab, words)).collect();
    let queries: Vec<String> = (0..500).map(|_| rng.text(vocab, 8)).collect();
    let ids: Vec<u64> = (0..docs as u64).collect();

    let mut index = Bm25Index::default();
    let start = Instant::now();
    index.add(&ids, &texts).expect("add");
    let build = start.elapsed().as_secs_f64();

    let start = Instant::now();
    for q in &queries {
        std::hint::black_box(index.search(q, 10, None));
    }
    let fast = micros(start.elapsed().as_secs_f64(), queries.len());
    let start = Instant::now();
    for q in &queries {
        std::hint::black_box(index.search_exhaustive(q, 10, None));
    }
    let slow = micros(start.elapsed().as_secs_f64(), queries.len());

    let extra: Vec<String> = (0..1000).map(|_| rng.text(vocab, words)).collect();
    let mut adds = Vec::with_capacity(extra.len());
    for (i, text) in extra.iter().enumerate() {
        let id = [(docs + i) as u64];
        let start = Instant::now();
        index.add(&id, &[text]).expect("add one");
        adds.push(start.elapsed().as_secs_f64());
    }
    let mut removes = Vec::with_capacity(1000);
    for i in 0..1000u64 {
        let start = Instant::now();
        index.remove(&[i * 3]).expect("remove one");
        removes.push(start.elapsed().as_secs_f64());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e6
    };
    println!(
        "{name}: {docs} docs, {:.0} docs/s to index; search k=10 {fast:.1} µs \
         (exhaustive {slow:.1} µs, {:.1}x); add one {:.1} µs, remove one {:.1} µs (medians)",
        docs as f64 / build,
        slow / fast,
        median(&mut adds),
        median(&mut removes),
    );
}

fn main() {
    let scale: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1.0);
    run("short", (100_000.0 * scale) as usize, 12, 60_000);
    run("long", (5_000.0 * scale) as usize, 200, 30_000);
}
