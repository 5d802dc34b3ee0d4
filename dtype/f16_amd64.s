//go:build !noasm

#include "textflag.h"

// The kernels follow bf16_amd64.s: sixteen elements an iteration, SI walking
// src, DI dst, CX counting the blocks. VCVTPS2PH and VCVTPH2PS convert
// finite values, subnormals and infinities as IEEE does: exactly, or with
// the rounding of the immediate, 0 (nearest even), and Go's default MXCSR
// (no FTZ, no DAZ) flushes nothing. NaNs keep their payload there, though,
// where the scalar code gives one NaN per sign, so NaN lanes are patched.

// func encodeF16AVX512(dst []uint16, src []float32, lim float32)
TEXT ·encodeF16AVX512(SB), NOSPLIT, $0-52
	MOVQ         dst_base+0(FP), DI
	MOVQ         src_base+24(FP), SI
	MOVQ         src_len+32(FP), CX
	VBROADCASTSS lim+48(FP), Z4
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z5
	VPXORD       Z4, Z5, Z6       // -lim
	MOVL         $0x7fc00000, AX
	VPBROADCASTD AX, Z7
	SHRQ         $4, CX
	JZ           done

loop:
	VMOVUPS   (SI), Z0
	VMINPS    Z0, Z4, Z0         // clamp(x, lim), NaN passing: see bf16_amd64.s
	VMAXPS    Z0, Z6, Z0
	VCMPPS    $3, Z0, Z0, K1     // unordered: the NaN lanes
	VPANDD    Z5, Z0, K1, Z0
	VPORD     Z7, Z0, K1, Z0     // NaN lanes: sign | 0x7fc00000, which converts to sign | 0x7e00
	VCVTPS2PH $0, Z0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET

// func decodeF16AVX512(dst []float32, src []uint16)
TEXT ·decodeF16AVX512(SB), NOSPLIT, $0-48
	MOVQ         dst_base+0(FP), DI
	MOVQ         src_base+24(FP), SI
	MOVQ         src_len+32(FP), CX
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z5
	MOVL         $0x7fc00000, AX
	VPBROADCASTD AX, Z7
	SHRQ         $4, CX
	JZ           done

loop:
	VCVTPH2PS (SI), Z0
	VCMPPS    $3, Z0, Z0, K1     // unordered: the NaN lanes
	VPANDD    Z5, Z0, K1, Z0
	VPORD     Z7, Z0, K1, Z0     // NaN lanes: sign | 0x7fc00000, as F32FromF16 gives
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET
