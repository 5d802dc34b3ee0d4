package data

import "fmt"

// Tokens is a stream of token ids held in the smallest unsigned integer
// type that holds every id of its vocabulary: one byte a token for the
// corpus's and the byte tokenizer's vocabularies, two for GPT-2's 50257
// ids, four above 65536. A text of 64 MB then takes 64 MB, not the 512 MB
// of one int a token. The zero value holds no tokens; Append to it is an
// error, since it has no vocabulary.
type Tokens struct {
	vocab int
	u8    []uint8
	u16   []uint16
	u32   []uint32
}

// NewTokens returns an empty stream of ids below vocab, with room for n.
func NewTokens(vocab, n int) Tokens {
	t := Tokens{vocab: vocab}
	switch t.Width() {
	case 1:
		t.u8 = make([]uint8, 0, n)
	case 2:
		t.u16 = make([]uint16, 0, n)
	default:
		t.u32 = make([]uint32, 0, n)
	}
	return t
}

// TokensOf returns ids as a stream of a vocabulary of vocab ids.
func TokensOf(vocab int, ids []int) (Tokens, error) {
	t := NewTokens(vocab, len(ids))
	return t, t.Append(ids...)
}

// Width is the bytes a token takes.
func (t Tokens) Width() int {
	switch {
	case t.vocab <= 1<<8:
		return 1
	case t.vocab <= 1<<16:
		return 2
	}
	return 4
}

// Vocab is the number of ids the stream can hold.
func (t Tokens) Vocab() int { return t.vocab }

// Append adds ids; an id outside the vocabulary is an error, and then
// nothing is added.
func (t *Tokens) Append(ids ...int) error {
	for _, id := range ids {
		if id < 0 || id >= t.vocab {
			return fmt.Errorf("data: token id %d is outside a vocabulary of %d ids", id, t.vocab)
		}
	}
	for _, id := range ids {
		switch t.Width() {
		case 1:
			t.u8 = append(t.u8, uint8(id))
		case 2:
			t.u16 = append(t.u16, uint16(id))
		default:
			t.u32 = append(t.u32, uint32(id))
		}
	}
	return nil
}

// Len is the number of tokens.
func (t Tokens) Len() int { return len(t.u8) + len(t.u16) + len(t.u32) }

// Bytes is the memory the tokens take.
func (t Tokens) Bytes() int { return t.Len() * t.Width() }

// AppendTo appends the ids at [from, to) to dst.
func (t Tokens) AppendTo(dst []int, from, to int) []int {
	switch {
	case t.u8 != nil:
		for _, id := range t.u8[from:to] {
			dst = append(dst, int(id))
		}
	case t.u16 != nil:
		for _, id := range t.u16[from:to] {
			dst = append(dst, int(id))
		}
	default:
		for _, id := range t.u32[from:to] {
			dst = append(dst, int(id))
		}
	}
	return dst
}

// Ints returns every id, one int each.
func (t Tokens) Ints() []int { return t.AppendTo(make([]int, 0, t.Len()), 0, t.Len()) }

// Encode returns the tokens tok gives text, of tok's vocabulary.
func Encode(tok Tokenizer, text string) (Tokens, error) {
	return TokensOf(tok.VocabSize(), tok.Encode(text))
}
