//go:build forkbox_agent

package harden

// compiledFilter is the filter assembled ahead (see filter_live_linux.go).
func compiledFilter() (*filterProgram, error) {
	return &filterProgram{prog: generatedProgram, names: generatedNames}, nil
}
