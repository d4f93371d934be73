package agent

import "sort"

func sortEntries(e []FileEntry) {
	sort.Slice(e, func(i, j int) bool { return e[i].Name < e[j].Name })
}
