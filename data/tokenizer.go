package data

import (
	"fmt"
	"strings"
)

// Tokenizer turns text into the ids a language model trains on and back.
type Tokenizer interface {
	// Encode returns the ids of text.
	Encode(text string) []int
	// Decode returns the text of ids; an id it does not know decodes to
	// U+FFFD.
	Decode(ids []int) string
	// VocabSize is one more than the largest id Encode returns.
	VocabSize() int
}

// Tokenizer names accepted by LoadTokenizer.
const (
	// TokenizerBytes is one id per byte: 256 ids, exact for any text.
	TokenizerBytes = "bytes"
	// TokenizerGPT2 is GPT-2's byte-level BPE, read from a folder.
	TokenizerGPT2 = "gpt2"
)

// TokenizerNames lists the names LoadTokenizer accepts.
var TokenizerNames = []string{TokenizerBytes, TokenizerGPT2}

// LoadTokenizer returns the tokenizer called name; gpt2 reads its files
// from dir (see LoadGPT2), bytes takes no dir.
func LoadTokenizer(name, dir string) (Tokenizer, error) {
	switch name {
	case TokenizerBytes:
		if dir != "" {
			return nil, fmt.Errorf("data: tokenizer bytes reads no files, but a tokenizer folder %s was given", dir)
		}
		return Bytes{}, nil
	case TokenizerGPT2:
		return LoadGPT2(dir)
	}
	return nil, fmt.Errorf("data: unknown tokenizer %q (accepted: %s)", name, strings.Join(TokenizerNames, ", "))
}

// Bytes is the byte-level tokenizer: each byte is its own id.
type Bytes struct{}

var _ Tokenizer = Bytes{}

func (Bytes) Encode(text string) []int {
	ids := make([]int, len(text))
	for i := range len(text) {
		ids[i] = int(text[i])
	}
	return ids
}

func (Bytes) Decode(ids []int) string {
	var sb strings.Builder
	sb.Grow(len(ids))
	for _, id := range ids {
		if id < 0 || id > 0xff {
			sb.WriteRune('\uFFFD')
			continue
		}
		sb.WriteByte(byte(id))
	}
	return sb.String()
}

func (Bytes) VocabSize() int { return 256 }

// CorpusVocab is the Go corpus's vocabulary (EncodeText, DecodeText) as a
// Tokenizer.
type CorpusVocab struct{}

var _ Tokenizer = CorpusVocab{}

func (CorpusVocab) Encode(text string) []int { return EncodeText(text) }
func (CorpusVocab) Decode(ids []int) string  { return DecodeText(ids) }
func (CorpusVocab) VocabSize() int           { return VocabSize }
