//! Saving and loading a [`Bm25Index`] through [`crate::persist`].
//!
//! Payload, version 1 (little-endian, lengths as `u64`):
//! `k1: f64, b: f64, language: str, stopwords: u8 (0 none, 1 the language's,
//! 2 custom) [+ count + str each], stemming: u8, fold_accents: u8,
//! ids: u64s` (live documents, in order), then the number of terms and for
//! each `text: str, docs: u32s, tfs: u32s`, with documents numbered by their
//! position in `ids`. Dead documents are left out, so a loaded index is
//! compact. Document lengths and forward lists are rebuilt from the
//! postings, and every invariant is checked on the way in.

use std::path::Path;

use crate::idmap::SlotMap;
use rustc_hash::FxHashMap;

use crate::codec::{DecodeError, DecodeResult, Reader, Writer};
use crate::error::Result;
use crate::persist::{self, corrupt, Kind};

use super::analyzer::{Analyzer, AnalyzerConfig, Stopwords};
use super::index::{Bm25Index, Postings};
use super::language::Language;
use super::scoring::Bm25Params;

pub(crate) const KIND: Kind = Kind(*b"BM25");
pub(crate) const VERSION: u32 = 1;

impl Bm25Index {
    /// Writes the index to `path`, atomically replacing any file there.
    pub fn save(&self, path: &Path) -> Result<()> {
        persist::save(path, KIND, VERSION, &self.encode())
    }

    pub fn load(path: &Path) -> Result<Bm25Index> {
        let (_, payload) = persist::load(path, KIND, VERSION)?;
        decode(&payload).map_err(|DecodeError(reason)| corrupt(path, reason))
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(16 * self.fwd_terms.len() + 64);
        w.f64(self.params.k1);
        w.f64(self.params.b);
        let config = self.analyzer.config();
        w.str(config.language.name());
        match &config.stopwords {
            Stopwords::None => w.u8(0),
            Stopwords::Language => w.u8(1),
            Stopwords::Custom(words) => {
                w.u8(2);
                w.u64(words.len() as u64);
                for word in words {
                    w.str(word);
                }
            }
        }
        w.u8(u8::from(config.stemming));
        w.u8(u8::from(config.fold_accents));

        let mut remap = vec![u32::MAX; self.doc_ids.len()];
        let mut ids = Vec::with_capacity(self.len());
        for (d, live) in self.live.iter().enumerate() {
            if *live {
                remap[d] = ids.len() as u32;
                ids.push(self.doc_ids[d]);
            }
        }
        w.u64s(&ids);
        w.u64(self.live_terms as u64);
        let (mut docs, mut tfs) = (Vec::new(), Vec::new());
        for (tid, p) in self.postings.iter().enumerate() {
            if p.df == 0 {
                continue;
            }
            docs.clear();
            tfs.clear();
            for (&d, &tf) in p.docs.iter().zip(&p.tfs) {
                if remap[d as usize] != u32::MAX {
                    docs.push(remap[d as usize]);
                    tfs.push(tf);
                }
            }
            w.str(&self.term_text[tid]);
            w.u32s(&docs);
            w.u32s(&tfs);
        }
        w.into_inner()
    }
}

fn bad(reason: impl Into<String>) -> DecodeError {
    DecodeError(reason.into())
}

fn flag(r: &mut Reader<'_>, what: &str) -> DecodeResult<bool> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        x => Err(bad(format!("{what} flag is {x}, expected 0 or 1"))),
    }
}

pub(crate) fn decode(payload: &[u8]) -> DecodeResult<Bm25Index> {
    let mut r = Reader::new(payload);
    let (k1, b) = (r.f64()?, r.f64()?);
    let params = Bm25Params::new(k1, b).map_err(|e| bad(e.to_string()))?;
    let language = Language::parse(r.str()?).map_err(|e| bad(e.to_string()))?;
    let stopwords = match r.u8()? {
        0 => Stopwords::None,
        1 => Stopwords::Language,
        2 => {
            let n = r.u64()?;
            let mut words = Vec::new();
            for _ in 0..n {
                words.push(r.str()?.to_owned());
            }
            Stopwords::Custom(words)
        }
        x => return Err(bad(format!("unknown stopword mode {x}"))),
    };
    let stemming = flag(&mut r, "stemming")?;
    let fold_accents = flag(&mut r, "fold_accents")?;
    let config = AnalyzerConfig {
        language,
        stopwords,
        stemming,
        fold_accents,
    };

    let doc_ids = r.u64s()?;
    let n_docs = doc_ids.len();
    if n_docs >= u32::MAX as usize {
        return Err(bad(format!(
            "{n_docs} documents is more than an index holds"
        )));
    }
    let mut slots = SlotMap::default();
    slots.reserve(n_docs);
    for (d, &id) in doc_ids.iter().enumerate() {
        if slots.insert(id, d as u32).is_some() {
            return Err(bad(format!("id {id} is stored twice")));
        }
    }

    let n_terms = r.u64()?;
    let mut term_text: Vec<Box<str>> = Vec::new();
    let mut postings: Vec<Postings> = Vec::new();
    let mut vocab = FxHashMap::default();
    // Each document's length and number of terms side by side: the postings visit
    // documents in no order, and one cache line a posting beats two.
    let mut tally = vec![[0u32; 2]; n_docs];
    for _ in 0..n_terms {
        let text: Box<str> = r.str()?.into();
        let docs = r.u32s()?;
        let tfs = r.u32s()?;
        if text.is_empty() || docs.is_empty() || docs.len() != tfs.len() {
            return Err(bad(format!("term {text:?} has malformed postings")));
        }
        if docs.windows(2).any(|w| w[0] >= w[1]) || docs[docs.len() - 1] as usize >= n_docs {
            return Err(bad(format!(
                "term {text:?} has unsorted or out-of-range documents"
            )));
        }
        if tfs.contains(&0) {
            return Err(bad(format!("term {text:?} has a zero term frequency")));
        }
        for (&d, &tf) in docs.iter().zip(&tfs) {
            let [len, terms] = &mut tally[d as usize];
            *len = len
                .checked_add(tf)
                .ok_or_else(|| bad("a document is too long"))?;
            *terms += 1; // at most one posting per term: fewer than 2^32 terms fit
        }
        let tid = term_text.len() as u32;
        if vocab.insert(text.clone(), tid).is_some() {
            return Err(bad(format!("term {text:?} is stored twice")));
        }
        term_text.push(text);
        postings.push(Postings {
            df: docs.len() as u32,
            docs,
            tfs,
            lens: Vec::new(),
            max_tf: 0,
            min_len: 0,
        });
    }
    if !r.is_empty() {
        return Err(bad("trailing bytes after the index"));
    }
    let doc_lens: Vec<u32> = tally.iter().map(|&[len, _]| len).collect();
    for p in &mut postings {
        p.max_tf = p.tfs.iter().copied().max().unwrap_or(0);
        p.lens = p.docs.iter().map(|&d| doc_lens[d as usize]).collect();
        p.min_len = p.lens.iter().copied().min().unwrap_or(0);
    }

    // Forward lists, filled in term order so each comes out sorted.
    let mut fwd_start = Vec::with_capacity(n_docs + 1);
    fwd_start.push(0usize);
    for &[_, n] in &tally {
        fwd_start.push(fwd_start[fwd_start.len() - 1] + n as usize);
    }
    let total = fwd_start[n_docs];
    let mut fill = fwd_start[..n_docs].to_vec();
    let (mut fwd_terms, mut fwd_tfs) = (vec![0u32; total], vec![0u32; total]);
    for (tid, p) in postings.iter().enumerate() {
        for (&d, &tf) in p.docs.iter().zip(&p.tfs) {
            let at = &mut fill[d as usize];
            fwd_terms[*at] = tid as u32;
            fwd_tfs[*at] = tf;
            *at += 1;
        }
    }

    let live_terms = postings.len();
    Ok(Bm25Index {
        params,
        analyzer: Analyzer::new(config),
        vocab,
        term_text,
        postings,
        live_terms,
        total_len: doc_lens.iter().map(|&l| u64::from(l)).sum(),
        live: vec![true; n_docs],
        doc_lens,
        doc_ids,
        fwd_start,
        fwd_terms,
        fwd_tfs,
        slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("memlane-bm25-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join("index.bm25")
    }

    #[test]
    fn round_trip_after_churn() {
        let mut ix = Bm25Index::new(
            Bm25Params::new(0.9, 0.4).unwrap(),
            AnalyzerConfig {
                language: Language::French,
                stopwords: Stopwords::Custom(vec!["le".into(), "la".into()]),
                stemming: true,
                fold_accents: true,
            },
        );
        let texts = [
            "le chat mange",
            "la souris danse",
            "chats et souris",
            "été chaud",
        ];
        ix.add(&[10, 20, 30, 40], &texts).unwrap();
        ix.remove(&[20]).unwrap();
        ix.add(&[10], &["le chien mange"]).unwrap();
        let path = tmp("rt");
        ix.save(&path).unwrap();
        let back = Bm25Index::load(&path).unwrap();
        assert_eq!(back.params(), ix.params());
        assert_eq!(back.analyzer().config(), ix.analyzer().config());
        assert_eq!(back.len(), 3);
        assert_eq!(back.total_len, ix.total_len);
        assert_eq!(back.vocabulary_size(), ix.vocabulary_size());
        for q in ["chat", "souris", "mange chien", "ete", "rien"] {
            assert_eq!(back.search(q, 10, None), ix.search(q, 10, None), "{q}");
        }
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn damaged_payloads_are_corrupt_not_panics() {
        let mut ix = Bm25Index::default();
        ix.add(&[1, 2], &["alpha beta", "beta gamma gamma"])
            .unwrap();
        let payload = ix.encode();
        // Every truncation and every single-byte change decodes to an error or
        // to a valid index; none panics.
        for cut in 0..payload.len() {
            assert!(decode(&payload[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..payload.len() {
            let mut p = payload.clone();
            p[i] ^= 0xA5;
            let _ = decode(&p);
        }
        let path = tmp("bad");
        std::fs::write(&path, b"not an index at all, just bytes").unwrap();
        assert!(matches!(Bm25Index::load(&path), Err(Error::Corrupt { .. })));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
