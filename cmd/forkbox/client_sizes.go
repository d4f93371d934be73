package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// mibFlag is a memory or disk size flag in MiB, the unit of the API's
// memory_mb and disk_mb: a plain number is MiB ("2048"), or a size with a
// binary unit ("512M", "1G", "1.5G", "512MiB", "2GB"; K, M, G, T, with or
// without "i" and "B", all binary). unlimited allows -1 (a quota's "no
// limit").
type mibFlag struct {
	name      string // the flag's name, for the message
	mib       int64
	unlimited bool
}

// sizeError is a flag value that is not a size. It is the whole message:
// sizeFlagErrors hands it on without pflag's "invalid argument" wrapping.
type sizeError struct {
	flag, value string
}

func (e *sizeError) Error() string {
	return fmt.Sprintf("--%s: %q is not a size; use 512M, 1G or a number of MiB", e.flag, e.value)
}

func (f *mibFlag) String() string {
	if f.mib == 0 {
		return ""
	}
	return strconv.FormatInt(f.mib, 10)
}

func (f *mibFlag) Set(s string) error {
	mib, err := parseMiB(s)
	if err != nil || (mib < 0 && !(f.unlimited && mib == -1)) {
		return &sizeError{flag: f.name, value: s}
	}
	f.mib = mib
	return nil
}

func (f *mibFlag) Type() string { return "size" }

// parseMiB parses a size in MiB: a plain number is MiB, a number with a
// unit is converted (rounded up to a whole MiB).
func parseMiB(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	num := strings.TrimRight(s, "KkMmGgTtIiBb")
	unit := strings.ToUpper(s[len(num):])
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	// MiB per unit; K is a fraction.
	per, ok := map[string]float64{"": 1, "K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || num == "" || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || v*per > 1<<40 {
		return 0, errors.New("not a size")
	}
	return int64(math.Ceil(v * per)), nil
}

// sizeFlagErrors makes cmd report a bad size flag with the size's own
// message (see sizeError), and other flag errors as cobra does.
func sizeFlagErrors(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		var se *sizeError
		if errors.As(err, &se) {
			return se
		}
		return err
	})
}

// humanMiB formats a size in MiB with binary units: 512 MiB, 2 GiB,
// 1.5 GiB; "-" for none.
func humanMiB(mib int64) string {
	switch {
	case mib <= 0:
		return "-"
	case mib < 1024:
		return fmt.Sprintf("%d MiB", mib)
	case mib%1024 == 0:
		return fmt.Sprintf("%d GiB", mib/1024)
	}
	return strconv.FormatFloat(float64(mib)/1024, 'f', 1, 64) + " GiB"
}
