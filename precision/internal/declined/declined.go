// Package declined keeps the modules a conversion plugin left as they
// were and why: what precision.ConversionReporter's Declined reports, for
// the plugins of fp8 and quant alike.
package declined

// Log maps module paths to why a plugin left them as they were. The zero
// Log is empty and ready to use.
type Log struct{ why map[string]string }

// Note records why the module at path was left as it was; an empty why
// records nothing.
func (l *Log) Note(path, why string) {
	if why == "" {
		return
	}
	if l.why == nil {
		l.why = map[string]string{}
	}
	l.why[path] = why
}

// Why returns what Note recorded for path.
func (l *Log) Why(path string) (why string, ok bool) {
	why, ok = l.why[path]
	return why, ok
}
