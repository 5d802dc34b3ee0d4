package philox

import "testing"

// TestKnownAnswers checks the Philox4x32-10 lines of Random123's
// kat_vectors (counter, key, expected block).
func TestKnownAnswers(t *testing.T) {
	for _, c := range []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, [2]uint32{0, 0},
			[4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		if got := Block(c.ctr, c.key); got != c.want {
			t.Errorf("Block(%08x, %08x) = %08x, want %08x", c.ctr, c.key, got, c.want)
		}
	}
}

// TestUint16s: the stream's words are the blocks' halves, low first, and
// a part of it drawn from any offset is that part of the whole.
func TestUint16s(t *testing.T) {
	key, stream := [2]uint32{0xa4093822, 0x299f31d0}, [2]uint32{7, 3}
	whole := make([]uint16, 40)
	Uint16s(whole, key, stream, 0)
	for i, w := range whole {
		b := Block([4]uint32{uint32(i / 8), 0, stream[0], stream[1]}, key)
		if want := uint16(b[i/2%4] >> (16 * (i % 2))); w != want {
			t.Fatalf("word %d = %04x, want %04x", i, w, want)
		}
	}
	for _, first := range []int{1, 7, 8, 13} {
		part := make([]uint16, 40-first)
		Uint16s(part, key, stream, uint64(first))
		for i, w := range part {
			if w != whole[first+i] {
				t.Fatalf("from %d: word %d = %04x, the whole stream's %04x", first, i, w, whole[first+i])
			}
		}
	}
}
