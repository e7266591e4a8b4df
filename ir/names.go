package ir

// QueryableServiceName reports whether a Consul service name can be
// watched and served: letters, digits, '-', '_' and '.', not "." or "..".
// Consul registers other names (a tab, a slash), but its own HTTP API
// cannot serve them (".." answers 404, a tab 400), and a watch that can
// never be read would hold readiness back for ever; nor are they sensible
// cluster names. The watcher skips such catalog services and the policy
// refuses to name them.
func QueryableServiceName(name string) bool {
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
