package image

import (
	"fmt"
	"io"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Bounds limit what one image import or build may bring onto the host. An
// archive is untrusted input: a few kilobytes of gzip can stand for
// terabytes of zeros, and a modest tar for millions of empty files, either
// of which would fill the daemon's disk or inode table before anything
// noticed. Each bound stops the import or build with a too_large error
// (413) that names it, and leaves nothing behind.
type Bounds struct {
	// ArchiveBytes bounds an archive as sent, compressed or not: an
	// import's image archive, a build's context.
	ArchiveBytes int64
	// ExpandedBytes bounds what an archive expands to: the decompressed
	// image archive, the uncompressed tar streams of its layers together,
	// a build context's uncompressed tar, and what a build's copy steps
	// copy together.
	ExpandedBytes int64
	// Files bounds the entries (files, directories, links, whiteouts) of
	// an import's layers together, of a build context, and of what a
	// build's copy steps copy together.
	Files int64
}

// DefaultBounds: an archive of 4 GiB as sent holds the largest images in
// common use (CUDA and deep-learning stacks run 2-4 GB compressed), 16 GiB
// expanded is the disk a build sandbox gets (so a build could make no
// bigger layer either) and four times what gzip usually achieves on image
// layers, and a million files is ten times a Debian system with the Python
// data stack (~100 000) and twice the largest distribution images.
var DefaultBounds = Bounds{ArchiveBytes: 4 << 30, ExpandedBytes: 16 << 30, Files: 1_000_000}

// Flags that set the bounds, named in the errors so that an operator knows
// which one to raise.
const (
	flagArchive  = "--max-image-archive-mb"
	flagExpanded = "--max-image-expanded-mb"
	flagFiles    = "--max-image-files"
)

// withDefaults fills the zero fields of b from DefaultBounds.
func (b Bounds) withDefaults() Bounds {
	if b.ArchiveBytes <= 0 {
		b.ArchiveBytes = DefaultBounds.ArchiveBytes
	}
	if b.ExpandedBytes <= 0 {
		b.ExpandedBytes = DefaultBounds.ExpandedBytes
	}
	if b.Files <= 0 {
		b.Files = DefaultBounds.Files
	}
	return b
}

// SetBounds sets the store's bounds; zero fields keep the defaults. Call
// before use.
func (s *Store) SetBounds(b Bounds) { s.bounds = b.withDefaults() }

// Bounds returns the store's bounds.
func (s *Store) Bounds() Bounds { return s.bounds.withDefaults() }

// mib renders a byte bound in MiB, as the flags take it.
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ArchiveTooLarge is the error of an archive over the archive bound; what
// names it ("image archive", "build context").
func ArchiveTooLarge(what string, limit int64) error {
	return errdefs.TooLarge("%s: more than %s as sent, the limit of this daemon (%s)", what, mib(limit), flagArchive)
}

// ExpandedTooLarge is the error of content over the expansion bound.
func ExpandedTooLarge(what string, limit int64) error {
	return errdefs.TooLarge("%s: more than %s expanded, the limit of this daemon (%s)", what, mib(limit), flagExpanded)
}

// TooManyFiles is the error of content over the file-count bound.
func TooManyFiles(what string, limit int64) error {
	return errdefs.TooLarge("%s: more than %d files, the limit of this daemon (%s)", what, limit, flagFiles)
}

// LimitArchive returns r that fails with ArchiveTooLarge once more than
// limit bytes were read from it.
func LimitArchive(r io.Reader, what string, limit int64) *LimitedArchive {
	return &LimitedArchive{r: r, left: limit, err: ArchiveTooLarge(what, limit)}
}

// LimitedArchive reads an archive until its bound, then fails (having read
// one byte more than allowed at most, to tell "exactly the limit" from
// "over it").
type LimitedArchive struct {
	r    io.Reader
	left int64
	err  error
}

func (b *LimitedArchive) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, b.err
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, b.err
	}
	return n, err
}

// Exceeded returns the bound's error once the archive went over it, else
// nil: the reader's consumer may have wrapped it in a kind of its own.
func (b *LimitedArchive) Exceeded() error {
	if b.left < 0 {
		return b.err
	}
	return nil
}

// Budget counts what one import or build writes against its bounds: bytes
// of expanded content and entries, over all the archives it extracts. It is
// used by one goroutine at a time. A nil *Budget bounds nothing.
type Budget struct {
	what     string // what is counted, for errors ("image layers", "build context")
	maxBytes int64
	maxFiles int64
	bytes    int64
	files    int64
}

// NewBudget returns a budget of b's expanded bytes and files for what.
func NewBudget(b Bounds, what string) *Budget {
	b = b.withDefaults()
	return &Budget{what: what, maxBytes: b.ExpandedBytes, maxFiles: b.Files}
}

// Add counts files entries and n bytes, failing (without counting) when
// that would go over a bound.
func (b *Budget) Add(files, n int64) error {
	if b == nil {
		return nil
	}
	if b.files+files > b.maxFiles {
		return TooManyFiles(b.what, b.maxFiles)
	}
	if b.bytes+n > b.maxBytes {
		return ExpandedTooLarge(b.what, b.maxBytes)
	}
	b.files += files
	b.bytes += n
	return nil
}

// fits reports the error Add would give for n more bytes, counting nothing:
// a file entry's size is known from its header, so an entry that would go
// over is refused before a byte of it is written.
func (b *Budget) fits(n int64) error {
	if b != nil && b.bytes+n > b.maxBytes {
		return ExpandedTooLarge(b.what, b.maxBytes)
	}
	return nil
}

// Reader returns r counting what is read from it as expanded bytes.
func (b *Budget) Reader(r io.Reader) io.Reader {
	if b == nil {
		return r
	}
	return budgetReader{b: b, r: r}
}

type budgetReader struct {
	b *Budget
	r io.Reader
}

func (c budgetReader) Read(p []byte) (int, error) {
	if left := c.b.maxBytes - c.b.bytes; int64(len(p)) > left+1 {
		p = p[:max(left+1, 0)]
	}
	n, err := c.r.Read(p)
	if aerr := c.b.Add(0, int64(n)); aerr != nil {
		return 0, aerr
	}
	return n, err
}
