package suggest

import "testing"

func TestClosest(t *testing.T) {
	keys := []string{"precision", "steps", "strategy", "lr_schedule"}
	for _, tt := range []struct {
		word, want string
		ok         bool
	}{
		{"precison", "precision", true}, // one rune left out
		{"stepz", "steps", true},
		{"stpes", "steps", true}, // two runes swapped
		{"strategie", "strategy", true},
		{"lr_schedul", "lr_schedule", true},
		{"strat", "strategy", true}, // a prefix
		{"st", "", false},           // too short a prefix
		{"colour", "", false},       // nothing near
	} {
		got, ok := Closest(tt.word, keys)
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("Closest(%q) = %q, %v; want %q, %v", tt.word, got, ok, tt.want, tt.ok)
		}
	}
	for _, tt := range []struct {
		a, b string
		want int
	}{{"kitten", "sitting", 3}, {"widht", "width", 1}, {"", "abc", 3}, {"ca", "abc", 3}} {
		if d := EditDistance(tt.a, tt.b); d != tt.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", tt.a, tt.b, d, tt.want)
		}
	}
}
