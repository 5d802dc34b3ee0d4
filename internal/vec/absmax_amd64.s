//go:build !noasm

#include "textflag.h"

// func absMaxAVX512(xs []float32) float32
//
// With their sign bits cleared, float32 bits order as unsigned integers as
// the values do, and NaNs come above +inf, so the largest |x|, or a NaN,
// is an integer maximum. Sixteen elements an iteration: SI walks xs, CX
// counts the blocks, Z1 holds the mask that clears the sign, and Z0 the
// maxima of the sixteen lanes, halved to one at the end.
TEXT ·absMaxAVX512(SB), NOSPLIT, $0-28
	MOVQ         xs_base+0(FP), SI
	MOVQ         xs_len+8(FP), CX
	MOVL         $0x7fffffff, AX
	VPBROADCASTD AX, Z1
	VPXORD       Z0, Z0, Z0
	SHRQ         $4, CX
	JZ           reduce

loop:
	VPANDD  (SI), Z1, Z2 // |x|
	VPMAXUD Z2, Z0, Z0
	ADDQ    $64, SI
	DECQ    CX
	JNZ     loop

reduce:
	VEXTRACTI64X4 $1, Z0, Y1
	VPMAXUD       Y1, Y0, Y0
	VEXTRACTI128  $1, Y0, X1
	VPMAXUD       X1, X0, X0
	VPSHUFD       $0x4e, X0, X1 // swap the 64-bit halves
	VPMAXUD       X1, X0, X0
	VPSHUFD       $0xb1, X0, X1 // swap the 32-bit pairs
	VPMAXUD       X1, X0, X0
	VMOVSS        X0, ret+24(FP)
	VZEROUPPER
	RET
