//go:build !noasm

#include "textflag.h"

// The ReLU kernels take sixteen elements an iteration; CX counts the
// blocks and Z15 holds zeros. Go's operand order is the reverse of
// Intel's: VMAXPS b, a, c is c = a > b ? a : b, which gives b for NaN and
// for two zeros; VCMPPS $p, b, a, K compares a with b.

// func reluAVX512(y, x []float32)
TEXT ·reluAVX512(SB), NOSPLIT, $0-48
	MOVQ   y_base+0(FP), DI
	MOVQ   x_base+24(FP), SI
	MOVQ   x_len+32(FP), CX
	VPXORD Z15, Z15, Z15
	SHRQ   $4, CX
	JZ     reluDone

reluLoop:
	VMOVUPS (SI), Z0
	VMAXPS  Z15, Z0, Z1    // x > 0 ? x : +0
	VCMPPS  $3, Z0, Z0, K1 // unordered: the NaN lanes
	VMOVAPS Z0, K1, Z1     // a NaN passes unchanged
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     reluLoop

reluDone:
	VZEROUPPER
	RET

// func reluBackwardAVX512(dx, y, dy []float32)
TEXT ·reluBackwardAVX512(SB), NOSPLIT, $0-72
	MOVQ   dx_base+0(FP), DI
	MOVQ   y_base+24(FP), SI
	MOVQ   y_len+32(FP), CX
	MOVQ   dy_base+48(FP), DX
	VPXORD Z15, Z15, Z15
	SHRQ   $4, CX
	JZ     backDone

backLoop:
	VMOVUPS   (SI), Z0
	VCMPPS    $6, Z15, Z0, K1 // not y ≤ 0 (NLE_US): y > 0 or NaN
	VMOVUPS.Z (DX), K1, Z1    // dy there, zero elsewhere
	VMOVUPS   Z1, (DI)
	ADDQ      $64, SI
	ADDQ      $64, DX
	ADDQ      $64, DI
	DECQ      CX
	JNZ       backLoop

backDone:
	VZEROUPPER
	RET
