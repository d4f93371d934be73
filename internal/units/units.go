// Package units formats byte counts for people, in one convention for the
// whole project: IEC binary units (1 KiB = 1024 bytes, then MiB, GiB, ...),
// the units the API's *_mb fields (MiB), the daemon's size flags and the CLI
// use, so that a size in a log line, an error message, the CLI or a model's
// prompt reads the same everywhere.
package units

import "strconv"

// iec are the prefixes past bytes; an int64 holds at most 8 EiB.
const iec = "KMGTPE"

// Bytes formats n bytes: "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "12.3 MiB",
// "4.0 GiB", up to "8.0 EiB". Sizes of a KiB or more have one decimal in the
// largest unit that keeps the number below 1024, counting the rounding, so
// 1 MiB less a byte is "1.0 MiB", never "1024.0 KiB". A negative n (no size)
// is printed as a plain number of bytes.
func Bytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, exp := float64(n)/1024, 0
	// 1023.95 and above would print as 1024.0: move to the next unit then.
	for v >= 1023.95 && exp < len(iec)-1 {
		v /= 1024
		exp++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + iec[exp:exp+1] + "iB"
}
