package otlp

import "google.golang.org/protobuf/encoding/protowire"

// Attr is one attribute: a string, or an integer when IsInt.
type Attr struct {
	Key   string
	Str   string
	Int   int64
	IsInt bool
}

// String is a string attribute.
func String(k, v string) Attr { return Attr{Key: k, Str: v} }

// Int is an integer attribute.
func Int(k string, v int64) Attr { return Attr{Key: k, Int: v, IsInt: true} }

// AppendKV appends a as a KeyValue, field num of the message being
// written (KeyValue: 1 key, 2 value; AnyValue: 1 string_value, 3 int_value).
func AppendKV(b []byte, num protowire.Number, a Attr) []byte {
	var av int
	if a.IsInt {
		av = protowire.SizeTag(3) + protowire.SizeVarint(uint64(a.Int))
	} else {
		av = protowire.SizeTag(1) + protowire.SizeBytes(len(a.Str))
	}
	kv := protowire.SizeTag(1) + protowire.SizeBytes(len(a.Key)) + protowire.SizeTag(2) + protowire.SizeBytes(av)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kv))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, a.Key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(av))
	if a.IsInt {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(a.Int))
	}
	return AppendString(b, 1, a.Str)
}

// AppendString appends s as string field num.
func AppendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
