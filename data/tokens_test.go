package data

import (
	"slices"
	"testing"
)

// TestTokensWidth: ids are held in the smallest type of their vocabulary
// and read back unchanged, at the vocabulary's edges too.
func TestTokensWidth(t *testing.T) {
	for _, tt := range []struct{ vocab, width int }{
		{VocabSize, 1}, {256, 1}, {257, 2}, {50257, 2}, {1 << 16, 2}, {1<<16 + 1, 4}, {128256, 4},
	} {
		ids := []int{0, 1, tt.vocab / 2, tt.vocab - 1}
		tok, err := TokensOf(tt.vocab, ids)
		if err != nil {
			t.Fatalf("vocab %d: %v", tt.vocab, err)
		}
		if tok.Width() != tt.width || tok.Bytes() != len(ids)*tt.width {
			t.Errorf("vocab %d: width %d, %d bytes; want %d a token", tt.vocab, tok.Width(), tok.Bytes(), tt.width)
		}
		if got := tok.Ints(); !slices.Equal(got, ids) {
			t.Errorf("vocab %d: read back %v, want %v", tt.vocab, got, ids)
		}
		if got := tok.AppendTo([]int{-7}, 1, 3); !slices.Equal(got, []int{-7, 1, tt.vocab / 2}) {
			t.Errorf("vocab %d: AppendTo = %v", tt.vocab, got)
		}
		if err := tok.Append(tt.vocab); err == nil || tok.Len() != len(ids) {
			t.Errorf("vocab %d: appending id %d: err %v, %d tokens; want an error and nothing added", tt.vocab, tt.vocab, err, tok.Len())
		}
	}
	var zero Tokens
	if err := zero.Append(0); err == nil {
		t.Error("the zero Tokens took an id")
	}
}

// TestLoadTextTakesAByteAToken: a byte-level text's streams take a byte a
// token, and LoadText counts the bytes it read.
func TestLoadTextTakesAByteAToken(t *testing.T) {
	root := textFolder(t, map[string]string{"a.txt": "0123456789", "b.txt": "abcdefghij"})
	got, err := LoadText(TextConfig{Path: root, Tokenizer: Bytes{}, ValFraction: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if got.Bytes != 20 || got.Train.Bytes()+got.Val.Bytes() != 20 {
		t.Errorf("read %d bytes into %d + %d bytes of tokens, want 20 into 20", got.Bytes, got.Train.Bytes(), got.Val.Bytes())
	}
}
