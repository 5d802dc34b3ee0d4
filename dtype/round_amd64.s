//go:build !noasm

#include "textflag.h"

// func roundBF16AVX512(xs []float32)
//
// Sixteen elements an iteration, in place: SI walks xs and CX counts the
// blocks of sixteen. It works on the bits as roundBF16 does rather than with
// VCVTNEPS2BF16, which flushes subnormals to zero.
TEXT ·roundBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ         xs_base+0(FP), SI
	MOVQ         xs_len+8(FP), CX
	MOVL         $1, AX
	VPBROADCASTD AX, Z6
	MOVL         $0x7fff, AX
	VPBROADCASTD AX, Z7
	MOVL         $0x00400000, AX
	VPBROADCASTD AX, Z8
	MOVL         $0xffff0000, AX
	VPBROADCASTD AX, Z9
	SHRQ         $4, CX
	JZ           done

loop:
	VMOVDQU32 (SI), Z0
	VCMPPS    $3, Z0, Z0, K1 // unordered: the NaN lanes
	VPSRLD    $16, Z0, Z1
	VPANDD    Z6, Z1, Z1
	VPADDD    Z0, Z1, Z1
	VPADDD    Z7, Z1, Z1     // b + 0x7fff + b>>16&1
	VPORD     Z8, Z0, K1, Z1 // NaN lanes: b | 0x400000, quieted
	VPANDD    Z9, Z1, Z1     // clear the low half
	VMOVDQU32 Z1, (SI)
	ADDQ      $64, SI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET
