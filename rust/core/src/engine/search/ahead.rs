//! A hybrid search's BM25 list, retrieved before its query vector exists.
//!
//! A search given text embeds the query first: one model run of some
//! milliseconds on one core, while the others wait. The BM25 list needs only
//! the text, so the caller can have it retrieved on another core meanwhile
//! ([`Engine::text_ahead`]) and hand it to the search
//! ([`Engine::search_with`]), which then walks the graph alone. A list is
//! taken only by a search of the same text, filter, depths and versions, with
//! the engine unchanged since (the generation of its retrieval cache); else
//! the search retrieves its own, so the hits are those of [`Engine::search`].

use super::{pools, SearchRequest};
use crate::bm25::{Hit, Query};
use crate::engine::admission::Admission;
use crate::engine::mode::Mode;
use crate::engine::retrievals::Key;
use crate::engine::{Engine, Filter};
use crate::error::Result;

/// A BM25 list retrieved ahead of its search.
pub struct TextAhead {
    /// The search's text, filter, depths and versions.
    key: Key,
    generation: u64,
    pub(in crate::engine) analysed: Query,
    pub(in crate::engine) hits: Vec<Hit>,
}

/// What a BM25 list depends on besides the engine's contents.
fn text_key(req: &SearchRequest<'_>, text: &str, pools: (usize, usize)) -> Key {
    Key::new(
        Some(text),
        None,
        req.mode,
        req.filter,
        pools,
        req.current_only,
        (false, false, false, false),
    )
}

impl TextAhead {
    /// Whether this list is the one `engine` would retrieve for `req`, whose
    /// text is `text` (None: blank) and depths `pools`.
    pub(in crate::engine) fn holds(
        &self,
        engine: &Engine,
        req: &SearchRequest<'_>,
        text: Option<&str>,
        pools: (usize, usize),
    ) -> bool {
        self.generation == engine.retrievals.generation()
            && req.mode == Mode::Hybrid
            && req.vector.is_some()
            && text.is_some_and(|t| self.key == text_key(req, t, pools))
    }
}

impl Engine {
    /// The BM25 list a hybrid search of `req` will retrieve once its vector
    /// is known (`req` is that search's request but for its vector, which
    /// [`Engine::search_with`] is given). None where the search would
    /// retrieve none (another mode, a blank text, no vector space, a filter
    /// selecting nothing) or would not keep it (a filter that reads access
    /// times, which searches change).
    pub fn text_ahead(&self, req: &SearchRequest<'_>) -> Result<Option<TextAhead>> {
        let Some(text) = req.text.filter(|t| !t.trim().is_empty()) else {
            return Ok(None);
        };
        if req.mode != Mode::Hybrid
            || self.dim().is_none()
            || req.filter.is_some_and(Filter::reads_access)
        {
            return Ok(None);
        }
        let pools = pools(req);
        // As the search will admit them: with a query vector.
        let admitted = self.admission(req.filter, req.current_only, pools.0.max(pools.1), true);
        if let Admission::Only { ids, .. } = &admitted {
            if ids.is_empty() {
                return Ok(None);
            }
        }
        let (pool, _) = self.pool_of(&admitted, pools);
        let analysed = self.bm25.query(text);
        let hits = self.text_list(&analysed, pool, &admitted)?;
        Ok(Some(TextAhead {
            key: text_key(req, text, pools),
            generation: self.retrievals.generation(),
            analysed,
            hits,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{flatten_metadata, Attrs, Batch, EngineConfig};
    use crate::scoring::Weights;

    const WORDS: [&str; 12] = [
        "river", "stone", "garden", "lamp", "winter", "violin", "harbor", "pepper", "candle",
        "meadow", "copper", "falcon",
    ];
    const DIM: usize = 8;

    /// A tiny deterministic generator: the same store every time.
    fn next(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *seed >> 33
    }

    fn vector(seed: &mut u64) -> Vec<f32> {
        (0..DIM)
            .map(|_| (next(seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    /// `n` records of three agents, every seventh superseded.
    fn store(n: u64) -> Engine {
        let mut e = Engine::new(EngineConfig {
            dim: Some(DIM),
            ..EngineConfig::default()
        })
        .unwrap();
        let mut seed = 7;
        let ids: Vec<u64> = (1..=n).collect();
        let mut texts = Vec::new();
        let mut vectors = Vec::new();
        let mut attrs = Vec::new();
        for id in &ids {
            let len = 2 + next(&mut seed) % 5;
            let words: Vec<&str> = (0..len)
                .map(|_| WORDS[(next(&mut seed) % WORDS.len() as u64) as usize])
                .collect();
            texts.push(words.join(" "));
            vectors.extend(vector(&mut seed));
            let agent = ["a", "b", "c"][(id % 3) as usize];
            attrs.push(Attrs {
                id: Some(format!("r{id}")),
                scope: [Some(agent.into()), None, None, None, None, None],
                created_at: *id as f64,
                updated_at: *id as f64,
                last_accessed_at: *id as f64,
                valid_to: (id % 7 == 0).then_some(1.0),
                metadata: flatten_metadata("{}").unwrap(),
                ..Attrs::blank("memories", "semantic")
            });
        }
        e.upsert(Batch {
            ids: &ids,
            texts: Some(&texts),
            vectors: Some(&vectors),
            attrs: &attrs,
        })
        .unwrap();
        e.index_pending(usize::MAX).unwrap();
        e
    }

    fn request<'a>(
        text: &'a str,
        vector: Option<&'a [f32]>,
        filter: Option<&'a Filter>,
    ) -> SearchRequest<'a> {
        SearchRequest {
            weights: Weights::resolve(Some(1.0), None, None).unwrap(),
            now: 1000.0,
            explain: true,
            filter,
            current_only: true,
            candidates: 20,
            ..SearchRequest::new(Some(text), vector, Mode::Hybrid, 5)
        }
    }

    /// The list retrieved ahead of a search, as the search will ask.
    fn ahead(e: &Engine, req: &SearchRequest<'_>) -> Option<TextAhead> {
        e.text_ahead(&SearchRequest {
            vector: None,
            ..*req
        })
        .unwrap()
    }

    #[test]
    fn a_search_given_its_list_ahead_finds_what_it_finds_alone() {
        // Two of the same store: neither search answers from the other's cache.
        let (with, alone) = (store(300), store(300));
        let filters = [
            None,
            Some(r#"{"agent_id": "a"}"#),
            Some(r#"{"agent_id": {"$ne": "b"}}"#),
        ];
        let mut seed = 11;
        let mut compared = 0;
        for f in filters {
            let parsed = f.map(|f| with.parse_filter(f).unwrap());
            for _ in 0..30 {
                let text = format!(
                    "{} {}",
                    WORDS[(next(&mut seed) % 12) as usize],
                    WORDS[(next(&mut seed) % 12) as usize]
                );
                let q = vector(&mut seed);
                let req = request(&text, Some(&q), parsed.as_ref());
                let list = ahead(&with, &req).expect("a hybrid search of words has a list");
                assert!(list.holds(&with, &req, Some(&text), pools(&req)));
                let hits = with.search_with(&req, Some(list)).unwrap();
                assert_eq!(hits, alone.search(&req).unwrap(), "{text:?} {f:?}");
                assert!(!hits.ids.is_empty());
                compared += 1;
            }
        }
        assert_eq!(compared, 90);
    }

    /// A list is taken only by its own search of the engine it was read
    /// from: given an emptied list, a search shows it took it by missing the
    /// hits only BM25 found.
    #[test]
    fn a_list_is_taken_only_by_its_search_of_an_unchanged_engine() {
        let mut e = store(200);
        let q = vector(&mut 5);
        let req = request("violin candle", Some(&q), None);
        let emptied = || {
            let mut list = ahead(&e, &req).unwrap();
            list.hits.clear();
            list
        };
        let taken = e.search_with(&req, Some(emptied())).unwrap();
        let fresh = store(200).search(&req).unwrap();
        assert_ne!(taken, fresh, "the emptied list was taken");
        assert!(taken.signals.iter().all(|s| s.bm25_rank.is_none()));

        // Another text, filter, depth or mode, or no vector: not taken.
        let other = request("violin lamp", Some(&q), None);
        let f = e.parse_filter(r#"{"agent_id": "a"}"#).unwrap();
        let scoped = request("violin candle", Some(&q), Some(&f));
        let deeper = SearchRequest {
            candidates: 21,
            ..request("violin candle", Some(&q), None)
        };
        let all = SearchRequest {
            current_only: false,
            ..request("violin candle", Some(&q), None)
        };
        let texts = SearchRequest {
            mode: Mode::Text,
            ..request("violin candle", Some(&q), None)
        };
        let blind = request("violin candle", None, None);
        for r in [&other, &scoped, &deeper, &all, &texts, &blind] {
            let twin = store(200);
            assert_eq!(
                e.search_with(r, Some(emptied())).unwrap(),
                twin.search(r).unwrap()
            );
        }

        // Read before a change of the engine: not taken after it.
        let list = emptied();
        let mut twin = store(200);
        for e in [&mut e, &mut twin] {
            e.upsert(Batch {
                ids: &[999],
                texts: Some(&["violin candle violin candle".to_string()]),
                vectors: Some(&vector(&mut 9)),
                attrs: &[Attrs {
                    id: Some("new".into()),
                    metadata: flatten_metadata("{}").unwrap(),
                    ..Attrs::blank("memories", "semantic")
                }],
            })
            .unwrap();
        }
        let hits = e.search_with(&req, Some(list)).unwrap();
        assert_eq!(hits, twin.search(&req).unwrap());
        assert!(hits.signals.iter().any(|s| s.bm25_rank.is_some()));
    }

    #[test]
    fn no_list_where_the_search_retrieves_none() {
        let e = store(50);
        let q = vector(&mut 3);
        let nobody = e.parse_filter(r#"{"agent_id": "zz"}"#).unwrap();
        let accessed = e.parse_filter(r#"{"access_count": 0}"#).unwrap();
        for req in [
            request("   ", Some(&q), None),
            request("river", Some(&q), Some(&nobody)),
            request("river", Some(&q), Some(&accessed)),
            SearchRequest {
                mode: Mode::Text,
                ..request("river", Some(&q), None)
            },
        ] {
            assert!(ahead(&e, &req).is_none());
        }
        let mut no_vectors = Engine::new(EngineConfig::default()).unwrap();
        no_vectors.set_ef(10).unwrap();
        assert!(ahead(&no_vectors, &request("river", None, None)).is_none());
    }
}
