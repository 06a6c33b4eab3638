//! Canonical JSON straight from a `Serialize` value (the form [`canonical_json`](super::canonical_json) gives its
//! `serde_json::Value`), without building the `Value`: each object's fields are written to a scratch buffer and
//! put in key order when it closes. Sealing a ledger entry does this on every decision.

use std::ops::Range;

use serde::ser::{self, Serialize, Serializer};
use serde_json::Error;

/// Writes `value`'s canonical JSON to `out`.
pub(super) fn write<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
    value.serialize(Canonical { out })
}

/// A scalar or string as serde_json writes it.
fn json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    serde_json::to_writer(out, value)
}

struct Canonical<'a> {
    out: &'a mut Vec<u8>,
}

/// An array being written; `close` ends it (`]`, or `]}` for a tuple variant).
struct Seq<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
    close: &'static [u8],
}

/// An object being gathered: its values in `scratch`, written in key order at its end (then `close`: `}` for a
/// struct variant's wrapper).
struct Object<'a> {
    out: &'a mut Vec<u8>,
    scratch: Vec<u8>,
    fields: Vec<(Key, Range<usize>)>,
    key: Option<String>,
    close: &'static [u8],
}

enum Key {
    Field(&'static str),
    Owned(String),
}

impl Key {
    fn as_str(&self) -> &str {
        match self {
            Key::Field(s) => s,
            Key::Owned(s) => s,
        }
    }
}

/// A thread's spare buffers of finished objects: sealing a ledger entry writes several objects per decision, and
/// taking their buffers from here spares an allocation and a free for each.
struct Spare {
    scratch: Vec<Vec<u8>>,
    fields: Vec<Vec<(Key, Range<usize>)>>,
}

/// How many spare buffers of each kind a thread keeps (deeper nesting allocates as before).
const SPARES: usize = 8;

thread_local! {
    static SPARE: std::cell::RefCell<Spare> =
        const { std::cell::RefCell::new(Spare { scratch: Vec::new(), fields: Vec::new() }) };
}

impl<'a> Object<'a> {
    fn new(out: &'a mut Vec<u8>, close: &'static [u8]) -> Self {
        let (scratch, fields) = SPARE
            .try_with(|spare| {
                let mut spare = spare.borrow_mut();
                (spare.scratch.pop().unwrap_or_default(), spare.fields.pop().unwrap_or_default())
            })
            .unwrap_or_default();
        Object { out, scratch, fields, key: None, close }
    }

    /// Gives the buffers back for the next object (emptied, their capacity kept).
    fn recycle(mut scratch: Vec<u8>, mut fields: Vec<(Key, Range<usize>)>) {
        scratch.clear();
        fields.clear();
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.scratch.len() < SPARES && scratch.capacity() <= 64 * 1024 {
                spare.scratch.push(scratch);
            }
            if spare.fields.len() < SPARES {
                spare.fields.push(fields);
            }
        });
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: Key, value: &T) -> Result<(), Error> {
        let start = self.scratch.len();
        value.serialize(Canonical { out: &mut self.scratch })?;
        self.fields.push((key, start..self.scratch.len()));
        Ok(())
    }

    fn finish(mut self) -> Result<(), Error> {
        self.fields.sort_unstable_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        self.out.push(b'{');
        for (i, (key, range)) in self.fields.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            json(self.out, key.as_str())?;
            self.out.push(b':');
            self.out.extend_from_slice(&self.scratch[range.clone()]);
        }
        self.out.push(b'}');
        self.out.extend_from_slice(self.close);
        Object::recycle(self.scratch, self.fields);
        Ok(())
    }
}

impl<'a> Serializer for Canonical<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Object<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        // As a `Value` holds it: widened to f64 (what `canonical_json` of `to_value` writes).
        json(self.out, &f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        // A `Value` holds no NaN or infinity: `to_value` makes them null.
        if v.is_finite() { json(self.out, &v) } else { json(self.out, &()) }
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        json(self.out, &v)
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        json(self.out, v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        json(self.out, v)
    }
    fn serialize_none(self) -> Result<(), Error> {
        json(self.out, &())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        json(self.out, &())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        json(self.out, &())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Error> {
        json(self.out, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.out.push(b'{');
        json(self.out, variant)?;
        self.out.push(b':');
        value.serialize(Canonical { out: &mut *self.out })?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, Error> {
        self.out.push(b'[');
        Ok(Seq { out: self.out, first: true, close: b"]" })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Seq<'a>, Error> {
        self.out.push(b'{');
        json(self.out, variant)?;
        self.out.extend_from_slice(b":[");
        Ok(Seq { out: self.out, first: true, close: b"]}" })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Object<'a>, Error> {
        Ok(Object::new(self.out, b""))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Object<'a>, Error> {
        Ok(Object::new(self.out, b""))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Object<'a>, Error> {
        self.out.push(b'{');
        json(self.out, variant)?;
        self.out.push(b':');
        Ok(Object::new(self.out, b"}"))
    }
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        value.serialize(Canonical { out: &mut *self.out })
    }

    fn finish(self) -> Result<(), Error> {
        self.out.extend_from_slice(self.close);
        Ok(())
    }
}

macro_rules! seq_impl {
    ($trait:ident, $method:ident) => {
        impl ser::$trait for Seq<'_> {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                self.finish()
            }
        }
    };
}

seq_impl!(SerializeSeq, serialize_element);
seq_impl!(SerializeTuple, serialize_element);
seq_impl!(SerializeTupleStruct, serialize_field);
seq_impl!(SerializeTupleVariant, serialize_field);

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        // A `Value`'s keys are text: a string key as it is, another (a number) as serde_json writes it.
        self.key = Some(match serde_json::to_value(key)? {
            serde_json::Value::String(text) => text,
            other => other.to_string(),
        });
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let key = self.key.take().unwrap_or_default();
        self.field(Key::Owned(key), value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        self.field(Key::Field(key), value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeStructVariant for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        self.field(Key::Field(key), value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}
