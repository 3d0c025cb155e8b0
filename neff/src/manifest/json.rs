//! The budgeted JSON reader of the manifest members: the one-pass cost scanner that refuses a
//! member before any tree is built, and the typed field accessors whose errors name the member
//! and the field.

use serde_json::{Map, Value};

use crate::container::Container;
use crate::error::NeffError;
use crate::model::DefShape;

pub(super) type Obj = Map<String, Value>;
/// A def.json table: its shape and (name, entry) pairs.
pub(super) type Table<'a> = (DefShape, Vec<(String, &'a Obj)>);

pub(super) fn bad(member: &str, field: &str, reason: impl Into<String>) -> NeffError {
    NeffError::manifest(member, field, reason)
}

/// Memory budget of parsing one JSON member: [`JSON_BUDGET_FACTOR`] × its bytes plus this.
pub const JSON_BUDGET_CONST: u64 = 1 << 20;
/// Memory budget of parsing one JSON member: this many times its bytes (plus
/// [`JSON_BUDGET_CONST`]).
pub const JSON_BUDGET_FACTOR: u64 = 64;
/// JSON objects one manifest member may hold (each costs a map node whatever its size).
pub const MAX_JSON_OBJECTS: u64 = 1 << 18;
/// Nesting depth of a manifest member (serde_json's own recursion limit).
pub const MAX_JSON_DEPTH: usize = 128;

/// What a JSON text will cost once parsed into a [`Value`] tree, counted by one pass over its
/// bytes that allocates nothing beyond a nesting stack of at most [`MAX_JSON_DEPTH`] entries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JsonCost {
    /// Objects (`{`).
    pub objects: u64,
    /// Object members (`"key": value`).
    pub entries: u64,
    /// Arrays (`[`).
    pub arrays: u64,
    /// Array elements.
    pub elements: u64,
    /// Strings (keys and values).
    pub strings: u64,
    /// Bytes inside strings.
    pub string_bytes: u64,
}

impl JsonCost {
    /// Counts `text`. Malformed JSON is counted as far as it goes (the parser refuses it
    /// afterwards); nesting deeper than [`MAX_JSON_DEPTH`] is an error.
    pub fn scan(text: &[u8]) -> Result<Self, String> {
        let mut c = JsonCost::default();
        // true = array, false = object.
        let mut stack: Vec<bool> = Vec::new();
        let mut in_str = false;
        let mut escaped = false;
        let mut fresh_array = false;
        for &b in text {
            if in_str {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_str = false;
                    continue;
                }
                c.string_bytes += 1;
                continue;
            }
            if b.is_ascii_whitespace() {
                continue;
            }
            if fresh_array {
                fresh_array = false;
                if b != b']' {
                    c.elements += 1;
                }
            }
            match b {
                b'"' => {
                    in_str = true;
                    c.strings += 1;
                }
                b'{' | b'[' => {
                    if stack.len() >= MAX_JSON_DEPTH {
                        return Err(format!("nested deeper than {MAX_JSON_DEPTH} levels"));
                    }
                    stack.push(b == b'[');
                    if b == b'[' {
                        c.arrays += 1;
                        fresh_array = true;
                    } else {
                        c.objects += 1;
                    }
                }
                b'}' | b']' => {
                    stack.pop();
                }
                b':' => c.entries += 1,
                b',' if stack.last() == Some(&true) => c.elements += 1,
                _ => {}
            }
        }
        Ok(c)
    }

    /// Estimated bytes of the parsed tree (an upper bound for well-formed JSON): a B-tree node
    /// of 11 key/value slots per object plus a share of a further node per member, a
    /// [`Value`] per array element with the vector's doubling slack, and a heap block per
    /// string.
    pub fn estimated_bytes(&self) -> u64 {
        let value = std::mem::size_of::<Value>() as u64;
        let key = std::mem::size_of::<String>() as u64;
        let node = 11 * (key + value) + 16;
        let heap_block = 16;
        self.objects
            .saturating_mul(node)
            .saturating_add(self.entries.saturating_mul(node / 5 + heap_block))
            .saturating_add(self.arrays.saturating_mul(value))
            .saturating_add(self.elements.saturating_mul(2 * value))
            .saturating_add(self.strings.saturating_mul(heap_block))
            .saturating_add(self.string_bytes)
    }
}

/// The memory budget of parsing `len` bytes of JSON.
pub fn json_budget(len: u64) -> u64 {
    len.saturating_mul(JSON_BUDGET_FACTOR).saturating_add(JSON_BUDGET_CONST)
}

/// Parses member `name` within the memory budget: its cost is counted first and a member that
/// would exceed [`json_budget`] or hold more than [`MAX_JSON_OBJECTS`] objects is refused
/// before any tree is built.
pub(super) fn parse_json(c: &Container, name: &str) -> Result<Value, NeffError> {
    let blob = c.member(name).ok_or_else(|| bad(name, "", "member is missing"))?;
    let cost = JsonCost::scan(&blob).map_err(|e| bad(name, "", format!("invalid JSON: {e}")))?;
    if cost.objects > MAX_JSON_OBJECTS {
        return Err(bad(
            name,
            "size",
            format!("{} JSON objects, over the limit of {MAX_JSON_OBJECTS} per manifest member", cost.objects),
        ));
    }
    let (need, budget) = (cost.estimated_bytes(), json_budget(blob.len() as u64));
    if need > budget {
        return Err(bad(
            name,
            "size",
            format!(
                "parsing needs an estimated {need} bytes, over the budget of {JSON_BUDGET_FACTOR} x {} bytes + \
                 {JSON_BUDGET_CONST}",
                blob.len()
            ),
        ));
    }
    serde_json::from_slice(&blob).map_err(|e| bad(name, "", format!("invalid JSON: {e}")))
}

pub(super) fn as_obj<'a>(v: &'a Value, member: &str, field: &str) -> Result<&'a Obj, NeffError> {
    v.as_object().ok_or_else(|| bad(member, field, format!("expected an object, found {}", kind(v))))
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn get<'a>(o: &'a Obj, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| o.get(*k))
}

pub(super) fn to_u64(v: &Value, member: &str, field: &str) -> Result<u64, NeffError> {
    v.as_u64().ok_or_else(|| bad(member, field, format!("expected an unsigned integer, found {v}")))
}

pub(super) fn to_i64(v: &Value, member: &str, field: &str) -> Result<i64, NeffError> {
    v.as_i64().ok_or_else(|| bad(member, field, format!("expected an integer, found {v}")))
}

pub(super) fn opt_u64(o: &Obj, keys: &[&str], member: &str, field: &str) -> Result<Option<u64>, NeffError> {
    get(o, keys).map(|v| to_u64(v, member, field)).transpose()
}

pub(super) fn opt_u32(o: &Obj, keys: &[&str], member: &str, field: &str) -> Result<Option<u32>, NeffError> {
    match opt_u64(o, keys, member, field)? {
        None => Ok(None),
        Some(v) => u32::try_from(v).map(Some).map_err(|_| bad(member, field, format!("{v} does not fit in 32 bits"))),
    }
}

pub(super) fn opt_str(o: &Obj, keys: &[&str], member: &str, field: &str) -> Result<Option<String>, NeffError> {
    match get(o, keys) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(bad(member, field, format!("expected a string, found {}", kind(v)))),
    }
}

pub(super) fn opt_bool(o: &Obj, key: &str, member: &str, field: &str) -> Result<bool, NeffError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(n != 0),
            None => Err(bad(member, field, format!("expected a bool, found {v}"))),
        },
    }
}

pub(super) fn u64_list(v: &Value, member: &str, field: &str) -> Result<Vec<u64>, NeffError> {
    let a = v.as_array().ok_or_else(|| bad(member, field, format!("expected an array, found {}", kind(v))))?;
    a.iter().map(|x| to_u64(x, member, field)).collect()
}

pub(super) fn i64_list(v: &Value, member: &str, field: &str) -> Result<Vec<i64>, NeffError> {
    let a = v.as_array().ok_or_else(|| bad(member, field, format!("expected an array, found {}", kind(v))))?;
    a.iter().map(|x| to_i64(x, member, field)).collect()
}

pub(super) fn u32_of(v: u64, member: &str, field: &str) -> Result<u32, NeffError> {
    u32::try_from(v).map_err(|_| bad(member, field, format!("{v} does not fit in 32 bits")))
}

/// Entries of a def.json table in either shape: object keyed by name, or array with `name`.
pub(super) fn table<'a>(v: &'a Value, member: &str, field: &str) -> Result<Table<'a>, NeffError> {
    match v {
        Value::Object(m) => {
            let mut out = Vec::with_capacity(m.len());
            for (k, e) in m {
                out.push((k.clone(), as_obj(e, member, &format!("{field}.{k}"))?));
            }
            Ok((DefShape::Object, out))
        }
        Value::Array(a) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, e) in a.iter().enumerate() {
                let f = format!("{field}[{i}]");
                let o = as_obj(e, member, &f)?;
                let name = opt_str(o, &["name"], member, &format!("{f}.name"))?
                    .ok_or_else(|| bad(member, &f, "array-shaped entry has no \"name\""))?;
                out.push((name, o));
            }
            Ok((DefShape::Array, out))
        }
        other => Err(bad(member, field, format!("expected an object or an array, found {}", kind(other)))),
    }
}
