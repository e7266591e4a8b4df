package consul

// QueryableName reports whether a catalog service name can be watched and
// served: letters, digits, '-', '_' and '.', not "." or "..". Consul
// registers other names (a tab, a slash), but its own HTTP API cannot
// serve them (".." answers 404, a tab 400), and a watch that can never be
// read would hold readiness back for ever; nor are they sensible cluster
// names.
func QueryableName(name string) bool {
	if name == "" || name == "." || name == ".." {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}
