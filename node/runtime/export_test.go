package runtime

// WithoutDevpts makes the process runtime rt start its jobs as it does
// once the kernel has refused one a devpts of its own: without /dev/pts.
func WithoutDevpts(rt Runtime) { rt.(*processRuntime).noDevpts.Store(true) }
