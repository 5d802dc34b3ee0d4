package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"strconv"
	"testing"

	"github.com/weftml/weft/fabric"
)

// rows runs the loop's phases [0, cut) and [cut, steps) (one phase when cut
// is steps) and returns the CSV it logged, header first.
func rows(t *testing.T, cut int) [][]string {
	var out bytes.Buffer
	logger := fabric.NewCSV(&out, "loss", "lr")
	dir := t.TempDir()
	for _, phase := range [][2]int{{0, cut}, {cut, steps}} {
		if phase[0] < phase[1] {
			if err := train(context.Background(), dir, phase[0], phase[1], logger); err != nil {
				t.Fatal(err)
			}
		}
	}
	recs, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestResumeIsStraight: the loop saved at step 20 and resumed by a fresh
// fabric logs the rows, bit for bit, of one that ran all 40 steps at once;
// a row per step, its rate the schedule's, and the loss falls.
func TestResumeIsStraight(t *testing.T) {
	straight, resumed := rows(t, steps), rows(t, steps/2)
	if len(resumed) != steps+1 || resumed[0][0] != "step" || resumed[0][1] != "loss" || resumed[0][2] != "lr" {
		t.Fatalf("the log has %d rows under header %v, want %d under step,loss,lr", len(resumed), resumed[0], steps+1)
	}
	for i, row := range resumed[1:] {
		if row[0] != strconv.Itoa(i) || row[2] != strconv.FormatFloat(schedule.LR(i), 'g', -1, 64) {
			t.Errorf("row %d is %v: want step %d at rate %v", i+1, row, i, schedule.LR(i))
		}
		if row[1] != straight[i+1][1] {
			t.Errorf("step %d: loss %s resumed at step %d, %s straight", i, row[1], steps/2, straight[i+1][1])
		}
	}
	first, _ := strconv.ParseFloat(resumed[1][1], 64)
	last, _ := strconv.ParseFloat(resumed[steps][1], 64)
	if !(last < 0.6*first) {
		t.Fatalf("loss %v at step 0, %v at step %d: want it to fall below 60%%", first, last, steps-1)
	}
}
