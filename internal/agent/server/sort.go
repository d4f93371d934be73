package server

import (
	"sort"

	"github.com/forkbox/forkbox/internal/agent/wire"
)

func sortEntries(e []wire.FileEntry) {
	sort.Slice(e, func(i, j int) bool { return e[i].Name < e[j].Name })
}
