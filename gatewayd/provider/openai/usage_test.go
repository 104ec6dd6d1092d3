package openai

import (
	"encoding/json"
	"testing"
)

// usageCases are answers and stream chunks, in the shape upstreams write and in every shape where the scanner
// must step aside: each case's usage is what encoding/json reads (usageOfJSON).
var usageCases = []struct {
	name, doc string
	// plain says whether scanUsage reads the document itself.
	plain bool
}{
	{"answer", `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"a \"usage\": {}"}}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`, true},
	{"usage chunk", `{"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":64,"total_tokens":69}}`, true},
	{"content chunk", `{"id":"x","choices":[{"delta":{"content":"tok1 "}}]}`, true},
	{"null usage", `{"choices":[{"delta":{}}],"usage":null}`, true},
	{"null choices", `{"choices":null,"usage":{"total_tokens":9}}`, true},
	{"no choices member", ` { "usage" : { "prompt_tokens" : -1 , "extra" : [1, {"a": "]"}] } } `, true},
	{"empty usage", `{"usage":{},"choices":[[],{},"x",1,true,null]}`, true},
	{"usage before choices", `{"usage":{"prompt_tokens":1},"choices":[1]}`, true},
	{"usage nested only", `{"choices":[{"usage":{"prompt_tokens":5}}]}`, true},
	{"largest int64", `{"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":-9223372036854775808}}`, true},
	{"escaped string values", `{"x":"\\\"}","usage":{"note":"\u0022","total_tokens":3}}`, true},
	{"overflow", `{"usage":{"prompt_tokens":9223372036854775808}}`, false},
	{"fraction", `{"usage":{"prompt_tokens":5.0}}`, false},
	{"exponent", `{"usage":{"prompt_tokens":5e1}}`, false},
	{"string count", `{"usage":{"prompt_tokens":"5"}}`, false},
	{"null count", `{"usage":{"prompt_tokens":null,"total_tokens":2}}`, false},
	{"duplicate usage", `{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`, false},
	{"duplicate count", `{"usage":{"prompt_tokens":1,"prompt_tokens":2}}`, false},
	{"duplicate choices", `{"choices":[],"choices":[1],"usage":{}}`, false},
	{"case variant of usage", `{"Usage":{"prompt_tokens":4}}`, false},
	{"case variant of a count", `{"usage":{"Prompt_Tokens":4}}`, false},
	{"unicode fold of usage", `{"uſage":{"prompt_tokens":4}}`, false},
	{"escaped name", `{"us\u0061ge":{"prompt_tokens":4}}`, false},
	{"choices object", `{"choices":{},"usage":{"prompt_tokens":4}}`, false},
	{"usage array", `{"usage":[1]}`, false},
	{"top-level array", `[{"usage":{"prompt_tokens":4}}]`, false},
	{"top-level null", `null`, false},
	{"invalid", `{"usage":{"prompt_tokens":4}`, false},
	{"trailing data", `{"usage":{"prompt_tokens":4}} {}`, false},
	{"empty", ``, false},
}

// TestUsageOf: usageOf reads every document as encoding/json does, and the scanner reads the upstreams' shape
// itself.
func TestUsageOf(t *testing.T) {
	for _, tc := range usageCases {
		t.Run(tc.name, func(t *testing.T) {
			u, ok, noChoices := usageOf([]byte(tc.doc))
			wu, wok, wnoChoices := usageOfJSON([]byte(tc.doc))
			if u != wu || ok != wok || noChoices != wnoChoices {
				t.Errorf("usageOf = %+v %v %v, encoding/json reads %+v %v %v", u, ok, noChoices, wu, wok, wnoChoices)
			}
			plain := false
			if json.Valid([]byte(tc.doc)) {
				_, _, _, plain = scanUsage([]byte(tc.doc))
			}
			if plain != tc.plain {
				t.Errorf("scanner read it itself: %v, want %v", plain, tc.plain)
			}
		})
	}
}

// TestUsageOfAllocatesNothing: an answer in the upstreams' shape is read without allocating.
func TestUsageOfAllocatesNothing(t *testing.T) {
	if raceOn {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	doc := []byte(usageCases[0].doc)
	if n := testing.AllocsPerRun(100, func() { usageOf(doc) }); n != 0 {
		t.Errorf("usageOf allocated %v times per call", n)
	}
}

// FuzzUsage: the scanner and encoding/json read every document alike.
func FuzzUsage(f *testing.F) {
	for _, tc := range usageCases {
		f.Add([]byte(tc.doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		u, ok, noChoices := usageOf(doc)
		wu, wok, wnoChoices := usageOfJSON(doc)
		if u != wu || ok != wok || noChoices != wnoChoices {
			t.Errorf("%q: usageOf = %+v %v %v, encoding/json reads %+v %v %v", doc, u, ok, noChoices, wu, wok, wnoChoices)
		}
	})
}

// BenchmarkUsageOf reads the usage of a non-streamed answer, with the scanner and with encoding/json.
func BenchmarkUsageOf(b *testing.B) {
	doc := []byte(usageCases[0].doc)
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			usageOf(doc)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			usageOfJSON(doc)
		}
	})
}
