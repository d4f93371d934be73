package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// samples is a set of durations measured by one benchmark.
type samples []time.Duration

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// msValues returns the samples in milliseconds.
func (s samples) msValues() values {
	v := make(values, len(s))
	for i, d := range s {
		v[i] = ms(d)
	}
	return v
}

func (s samples) percentile(p float64) float64 { return s.msValues().percentile(p) }
func (s samples) p50() float64                 { return s.percentile(50) }
func (s samples) p95() float64                 { return s.percentile(95) }
func (s samples) mean() float64                { return s.msValues().mean() }
func (s samples) max() float64                 { return s.msValues().max() }

// values is a set of measurements in some unit (MiB, ms...).
type values []float64

// percentile returns the p-th percentile (0 < p <= 100) by the nearest-rank
// method. An empty set gives NaN.
func (v values) percentile(p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func (v values) p50() float64 { return v.percentile(50) }
func (v values) p95() float64 { return v.percentile(95) }

// mean returns the arithmetic mean; NaN for an empty set.
func (v values) mean() float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// max returns the largest value; NaN for an empty set.
func (v values) max() float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Max(v)
}

// report adds p50, p95 and mean (prefixed, e.g. "create-" gives
// "create-p50-ms") as custom metrics of b.
func (s samples) report(b *testing.B, prefix string) {
	b.ReportMetric(s.p50(), prefix+"p50-ms")
	b.ReportMetric(s.p95(), prefix+"p95-ms")
	b.ReportMetric(s.mean(), prefix+"mean-ms")
}

// hideNsPerOp suppresses the default ns/op metric: every benchmark here takes
// a fixed number of samples per invocation, so time per b.N means nothing.
func hideNsPerOp(b *testing.B) { b.ReportMetric(0, "ns/op") }

// f formats a number for a table cell.
func f(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// verdict says whether value meets a "≤ target" goal.
func verdict(value, target float64) string {
	if math.IsNaN(value) {
		return "n/a"
	}
	if value <= target {
		return "yes"
	}
	return "**no**"
}

// tableHeader prints the header of a markdown table to stdout.
func tableHeader(cols ...string) {
	fmt.Println()
	fmt.Println("| " + strings.Join(cols, " | ") + " |")
	seps := make([]string, len(cols))
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Println("| " + strings.Join(seps, " | ") + " |")
}

// tableRow prints one markdown table row to stdout.
func tableRow(cells ...string) {
	fmt.Println("| " + strings.Join(cells, " | ") + " |")
}

func TestPercentile(t *testing.T) {
	var s samples
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	if got := s.p50(); got != 50 {
		t.Errorf("p50 = %v, want 50", got)
	}
	if got := s.p95(); got != 95 {
		t.Errorf("p95 = %v, want 95", got)
	}
	if got := s.mean(); got != 50.5 {
		t.Errorf("mean = %v, want 50.5", got)
	}
	one := samples{7 * time.Millisecond}
	if one.p50() != 7 || one.p95() != 7 {
		t.Errorf("single sample: p50 %v p95 %v, want 7", one.p50(), one.p95())
	}
	if !math.IsNaN(samples(nil).p50()) {
		t.Error("empty set: want NaN")
	}
}
