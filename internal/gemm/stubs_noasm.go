//go:build !amd64 || noasm

package gemm

// asmImpls returns no implementations: this build has no assembly kernels.
func asmImpls() []impl { return nil }
