//! Seeded, deterministic mutations of valid recordings.

use serde_json::{Value, json};

/// Raw JSON texts put in place of a value.
pub const HOSTILE: &[&str] = &[
    "-1",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "1e308",
    "-1e308",
    "1.5",
    "-0",
    "0",
    "null",
    "true",
    "\"\"",
    "\"\\u0000\\u001b[31m\"",
    "\"\\ud800\"",
    "[]",
    "{}",
    "[null]",
    "{\"a\":[1,{}]}",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
];

/// A seed with one to three mutations, then perhaps cut short or with bytes flipped. Most
/// mutations keep the value's type, so that most cases are read and reach the renderers with
/// values no recording has.
pub fn mutated(seeds: &[Value], rng: &mut Rng) -> (String, Vec<u8>) {
    let seed = rng.below(seeds.len());
    let mut doc = seeds[seed].clone();
    let mut name = format!("seed {seed}");
    let mut raw: Vec<String> = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(count(&doc));
        let node = nth_mut(&mut doc, &mut at.clone()).unwrap();
        if rng.below(5) == 0 {
            let text = *rng.pick(HOSTILE);
            name += &format!(", node {at} = {}", &text[..text.len().min(24)]);
            *node = Value::String(format!("@@RAW{}@@", raw.len()));
            raw.push(text.to_string());
            continue;
        }
        match node {
            Value::Number(_) => {
                let v = match rng.below(4) {
                    0 => u64::MAX - rng.below(3) as u64,
                    1 => u64::MAX / 2 + rng.below(3) as u64,
                    2 => rng.next(),
                    _ => rng.next() >> rng.below(64),
                };
                name += &format!(", node {at} = {v}");
                *node = json!(v);
            }
            Value::String(_) if rng.below(4) == 0 => {
                // A name ending in a number: a second count column to readers of folded stacks.
                let v = format!("f {}", rng.next() >> rng.below(64));
                name += &format!(", node {at} = {v:?}");
                *node = json!(v);
            }
            Value::String(_) => {
                let len = *rng.pick(&[0, 1, 511, 512, 513, 4096, 4097, 65536, 65537]);
                let ch = *rng.pick(&['a', 'é', '😀', '"', '\n', ';', ' ', '9', '<', '&', '\u{1b}']);
                name += &format!(", node {at} = {len} × {ch:?}");
                *node = json!(ch.to_string().repeat(len / ch.len_utf8()));
            }
            Value::Array(items) if !items.is_empty() => {
                let to = *rng.pick(&[64, 65, 66, 126, 127, 128, items.len() * 3]);
                name += &format!(", node {at} grown to {to}");
                while items.len() < to {
                    let one = items[rng.below(items.len())].clone();
                    items.push(one);
                }
            }
            Value::Object(map) if map.contains_key("slots") => {
                // Random slots and counts: quantiles and merges on nonsense.
                let slots: Vec<u64> = (0..rng.below(66))
                    .map(|_| rng.next() >> rng.below(64))
                    .collect();
                name += &format!(", node {at} = histogram of {} slots", slots.len());
                *node = json!({"slots": slots, "count": rng.next(), "sum": rng.next(), "max": rng.next()});
            }
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth(rng.below(map.len())).unwrap().clone();
                name += &format!(", node {at} without {key}");
                map.remove(&key);
            }
            _ => {}
        }
    }
    let mut text = if rng.below(2) == 0 {
        serde_json::to_string(&doc).unwrap()
    } else {
        serde_json::to_string_pretty(&doc).unwrap()
    };
    for (i, r) in raw.iter().enumerate() {
        text = text.replace(&format!("\"@@RAW{i}@@\""), r);
    }
    let mut bytes = text.into_bytes();
    match rng.below(8) {
        0 => {
            let at = rng.below(bytes.len() + 1);
            name += &format!(", cut at {at}");
            bytes.truncate(at);
        }
        1 => {
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(bytes.len());
                let b = rng.next() as u8;
                name += &format!(", byte {at} = {b:#x}");
                bytes[at] = b;
            }
        }
        _ => {}
    }
    (name, bytes)
}

/// Every u64 number in `v` set to u64::MAX (the u32 ones stay).
pub fn max_numbers(v: &mut Value) {
    match v {
        Value::Number(_) => *v = json!(u64::MAX),
        Value::Array(a) => a.iter_mut().for_each(max_numbers),
        Value::Object(o) => {
            for (k, v) in o.iter_mut() {
                if !["version", "pid", "tid", "refresh_every"].contains(&k.as_str()) {
                    max_numbers(v);
                }
            }
        }
        _ => {}
    }
}

/// Nodes of a JSON tree.
pub fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count).sum(),
        Value::Object(o) => o.values().map(count).sum(),
        _ => 0,
    }
}

/// The `n`th node in pre-order.
pub fn nth_mut<'a>(v: &'a mut Value, n: &mut usize) -> Option<&'a mut Value> {
    if *n == 0 {
        return Some(v);
    }
    *n -= 1;
    let children: Vec<&'a mut Value> = match v {
        Value::Array(a) => a.iter_mut().collect(),
        Value::Object(o) => o.values_mut().collect(),
        _ => return None,
    };
    for child in children {
        let size = count(child);
        if *n < size {
            return nth_mut(child, n);
        }
        *n -= size;
    }
    None
}

/// xorshift64: deterministic, so a failing case is the same on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
