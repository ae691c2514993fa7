//! Reading a `tokenizer.json` of the `tokenizers` library into a [`WordPiece`].
//!
//! Only what BERT's tokenizers use is read: a WordPiece model, a `BertNormalizer`
//! (or none), the `BertPreTokenizer`, a `BertProcessing` or `TemplateProcessing`
//! post-processor whose single-text template has type id 0 throughout (or none),
//! and added tokens matched verbatim. Anything else is refused with the reason,
//! so that the caller can hand the file to `tokenizers` instead. Truncation and
//! padding settings are not read: the caller chooses its own.

use serde_json::{Map, Value};

use super::normalize::BertNormalizer;
use super::{Vocab, WordPiece};

/// The reason a file is not one this module reads.
pub(super) type Refusal = String;

pub(super) fn parse(json: &str) -> Result<WordPiece, Refusal> {
    let root: Value = serde_json::from_str(json).map_err(|e| format!("invalid JSON: {e}"))?;
    let root = root.as_object().ok_or("the file is not a JSON object")?;

    let model = object(root, "model")?.ok_or("it has no model")?;
    let kind = string(model, "type")?.unwrap_or("WordPiece");
    if kind != "WordPiece" {
        return Err(format!("its model is {kind}, not WordPiece"));
    }
    let vocab = vocab(model)?;
    let unk_token = string(model, "unk_token")?.unwrap_or("[UNK]");
    let unk = *vocab
        .get(unk_token)
        .ok_or_else(|| format!("its unk_token {unk_token:?} is not in its vocab"))?;
    let prefix = string(model, "continuing_subword_prefix")?.unwrap_or("##");
    let max_word_chars = match model.get("max_input_chars_per_word") {
        None | Some(Value::Null) => 100,
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or("max_input_chars_per_word is not a count")?,
    };

    let normalizer = normalizer(root)?;
    match object(root, "pre_tokenizer")? {
        Some(p) if string(p, "type")? == Some("BertPreTokenizer") => {}
        Some(p) => {
            let kind = string(p, "type")?.unwrap_or("unnamed");
            return Err(format!("its pre_tokenizer is {kind}, not BertPreTokenizer"));
        }
        None => return Err("it has no pre_tokenizer (BertPreTokenizer expected)".into()),
    }
    let (before, after) = template(root)?;
    let added = added_tokens(root)?;
    let pad_id = match object(root, "padding")? {
        Some(p) => id(p.get("pad_id"), "padding.pad_id")?,
        None => 0,
    };
    Ok(WordPiece::new(
        Vocab::new(vocab, prefix),
        unk,
        max_word_chars,
        normalizer,
        added,
        (before, after),
        pad_id,
    ))
}

fn object<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, Refusal> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(format!("{key} is not an object")),
    }
}

fn string<'a>(parent: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, Refusal> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{key} is not a string")),
    }
}

fn flag(parent: &Map<String, Value>, key: &str) -> Result<Option<bool>, Refusal> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("{key} is not true or false")),
    }
}

fn id(value: Option<&Value>, what: &str) -> Result<u32, Refusal> {
    value
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("{what} is not a token id"))
}

fn vocab(model: &Map<String, Value>) -> Result<rustc_hash::FxHashMap<String, u32>, Refusal> {
    let entries = object(model, "vocab")?.ok_or("its model has no vocab")?;
    entries
        .iter()
        .map(|(token, value)| Ok((token.clone(), id(Some(value), "a vocab entry")?)))
        .collect()
}

fn normalizer(root: &Map<String, Value>) -> Result<Option<BertNormalizer>, Refusal> {
    let Some(n) = object(root, "normalizer")? else {
        return Ok(None);
    };
    match string(n, "type")? {
        Some("BertNormalizer") => {}
        other => {
            let kind = other.unwrap_or("unnamed");
            return Err(format!("its normalizer is {kind}, not BertNormalizer"));
        }
    }
    let defaults = BertNormalizer::default();
    let lowercase = flag(n, "lowercase")?.unwrap_or(defaults.lowercase);
    Ok(Some(BertNormalizer {
        clean_text: flag(n, "clean_text")?.unwrap_or(defaults.clean_text),
        handle_chinese_chars: flag(n, "handle_chinese_chars")?
            .unwrap_or(defaults.handle_chinese_chars),
        // Unset, it follows lowercase, as in the original BERT.
        strip_accents: flag(n, "strip_accents")?.unwrap_or(lowercase),
        lowercase,
    }))
}

/// The special token ids put before and after a single text's tokens.
fn template(root: &Map<String, Value>) -> Result<(Vec<u32>, Vec<u32>), Refusal> {
    let Some(post) = object(root, "post_processor")? else {
        return Ok((Vec::new(), Vec::new()));
    };
    match string(post, "type")? {
        Some("BertProcessing") => {
            let token = |key: &str| {
                post.get(key)
                    .and_then(Value::as_array)
                    .and_then(|pair| pair.get(1))
                    .ok_or_else(|| format!("BertProcessing.{key} is not a [token, id] pair"))
                    .and_then(|v| id(Some(v), &format!("BertProcessing.{key}")))
            };
            Ok((vec![token("cls")?], vec![token("sep")?]))
        }
        Some("TemplateProcessing") => template_processing(post),
        other => Err(format!(
            "its post_processor is {}, not BertProcessing or TemplateProcessing",
            other.unwrap_or("unnamed")
        )),
    }
}

fn template_processing(post: &Map<String, Value>) -> Result<(Vec<u32>, Vec<u32>), Refusal> {
    let items = post
        .get("single")
        .and_then(Value::as_array)
        .ok_or("TemplateProcessing has no single template")?;
    let specials = object(post, "special_tokens")?;
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let mut seen_sequence = false;
    for item in items {
        let item = item.as_object().ok_or("a template item is not an object")?;
        let (kind, body) = item.iter().next().ok_or("a template item is empty")?;
        let body = body.as_object().ok_or("a template item is not an object")?;
        if body.get("type_id").and_then(Value::as_u64).unwrap_or(0) != 0 {
            return Err("its single-text template has a type id other than 0".into());
        }
        match kind.as_str() {
            "Sequence" if !seen_sequence => seen_sequence = true,
            "SpecialToken" => {
                let name = string(body, "id")?.ok_or("a template special token has no id")?;
                let ids = specials
                    .and_then(|s| s.get(name))
                    .and_then(Value::as_object)
                    .and_then(|s| s.get("ids"))
                    .and_then(Value::as_array)
                    .ok_or_else(|| format!("the template's special token {name:?} has no ids"))?;
                let side = if seen_sequence {
                    &mut after
                } else {
                    &mut before
                };
                for v in ids {
                    side.push(id(Some(v), "a special token id")?);
                }
            }
            _ => return Err(format!("its single-text template has an item {kind:?}")),
        }
    }
    if !seen_sequence {
        return Err("its single-text template has no sequence".into());
    }
    Ok((before, after))
}

/// Added tokens, matched in the input as written (`normalized: false`) and
/// nowhere else (no `lstrip`, `rstrip` or `single_word`).
fn added_tokens(root: &Map<String, Value>) -> Result<Vec<(String, u32)>, Refusal> {
    let Some(list) = root.get("added_tokens").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = list.as_array().ok_or("added_tokens is not a list")?;
    let mut out = Vec::with_capacity(list.len());
    for token in list {
        let token = token.as_object().ok_or("an added token is not an object")?;
        let content = string(token, "content")?.ok_or("an added token has no content")?;
        // Unset, `normalized` is true for tokens that are not special, as in `tokenizers`.
        let special = flag(token, "special")?.unwrap_or(false);
        let normalized = flag(token, "normalized")?.unwrap_or(!special);
        for (key, set) in [
            ("normalized", normalized),
            ("lstrip", flag(token, "lstrip")?.unwrap_or(false)),
            ("rstrip", flag(token, "rstrip")?.unwrap_or(false)),
            ("single_word", flag(token, "single_word")?.unwrap_or(false)),
        ] {
            if set {
                return Err(format!("its added token {content:?} is {key}"));
            }
        }
        if !content.is_empty() {
            out.push((
                content.to_owned(),
                id(token.get("id"), "an added token's id")?,
            ));
        }
    }
    Ok(out)
}
