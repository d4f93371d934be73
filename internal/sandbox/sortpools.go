package sandbox

import (
	"sort"

	"github.com/forkbox/forkbox/api"
)

func sortPools(ps []api.Pool) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
}
