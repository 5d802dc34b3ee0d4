//go:build !noasm

#include "textflag.h"

// The GELU kernels are geluGo and geluBackwardGo eight elements at a time:
// their float32 operations on Y registers, erf32's and exp32's float64 ones
// on Z registers. Each Go operation is one instruction, on the same operands
// in the same order (Go's VSUBPD b, a, c is c = a - b); none is fused, so
// every one rounds as Go's does. Swapping the operands of an addition or a
// multiplication changes only which NaN comes out where two meet. The NaNs
// of a lane all carry its x's payload, but for a NaN dy: the backward
// multiplies by dy as go1.26 compiles geluBackwardGo, (cdf + x·pdf)·dy.
//
// A constant that is the minuend of a subtraction, or the first operand of
// VMAXPD, sits in a register; the others are broadcast from memory (.BCST).
// Both kernels end with VZEROUPPER, as the Z registers they dirty would slow
// later SSE code.

#define CONST64(name, value) DATA name<>+0(SB)/8, value; GLOBL name<>(SB), RODATA|NOPTR, $8
#define CONST32(name, value) DATA name<>+0(SB)/4, value; GLOBL name<>(SB), RODATA|NOPTR, $4

// float32 constants of the GELU formulas.
CONST32(sqrtHalf, $0x3f3504f3)   // float32(√½)
CONST32(invSqrt2Pi, $0x3ecc422a) // float32(1/√(2π))
CONST32(half32, $0x3f000000)     // 0.5
CONST32(negHalf32, $0xbf000000)  // -0.5
CONST32(one32, $0x3f800000)      // 1

CONST64(one, $1.0)
CONST64(absMask, $0x7fffffffffffffff)
CONST64(signMask, $0x8000000000000000)

// erf32's P(s), P0 - P1·s + P2·s² - …, on |x| < 2.
CONST64(erfP0, $1.1283791664417209)
CONST64(erfP1, $0.3761263518835721)
CONST64(erfP2, $0.11283755990707395)
CONST64(erfP3, $0.02686481255690162)
CONST64(erfP4, $0.005221287833968101)
CONST64(erfP5, $0.0008516772663351691)
CONST64(erfP6, $0.00011820274925197684)
CONST64(erfP7, $1.3771846605781235e-05)
CONST64(erfP8, $1.2670767072647804e-06)
CONST64(erfP9, $8.016638471108894e-08)
CONST64(erfP10, $2.5346048038166202e-09)

// erfTail's branch point, t = min(|x|, erfOne) - 3, and Q(t),
// Q0 - Q1·t + Q2·t² - Q3·t³ + Q4·t⁴.
CONST64(two, $2.0)
CONST64(erfOne, $4.0)
CONST64(three, $3.0)
CONST64(erfQ0, $-10.720362045420515)
CONST64(erfQ1, $6.303629848490578)
CONST64(erfQ2, $-0.9567130311475927)
CONST64(erfQ3, $0.00606838345915417)
CONST64(erfQ4, $0.002435485561656403)

// exp32's clamp (only expMin: GELUBackward's argument is ≤ 0) and
// expKernel's constants: e^r = 1 + C1·r + C2·r² + ….
CONST64(expMin, $-104.0)
CONST64(log2e, $0x3ff71547652b82fe)      // math.Log2E
CONST64(ln2, $0x3fe62e42fefa39ef)        // math.Ln2
CONST64(roundShift, $0x4338000000000000) // 0x1.8p52
CONST64(expBias, $1023)
CONST64(expC1, $1.0000000321882179)
CONST64(expC2, $0.49999994205971504)
CONST64(expC3, $0.16666431157752767)
CONST64(expC4, $0.041668002448510266)
CONST64(expC5, $0.008374164148689932)
CONST64(expC6, $0.0013843652326738943)

// EXPKERNEL sets e to expKernel(v), and overwrites k, r, r2 and t. The
// float64 v·log2e + roundShift, which is k + roundShift, holds k in its low
// bits: adding expBias to them and shifting them into the exponent gives
// 2^k as int64(k) does.
#define EXPKERNEL(v, e, k, r, r2, t) \
	VMULPD.BCST log2e<>(SB), v, k;      /* v·log2e */ \
	VADDPD.BCST roundShift<>(SB), k, k; /* k + roundShift */ \
	VSUBPD.BCST roundShift<>(SB), k, r; /* k */ \
	VMULPD.BCST ln2<>(SB), r, r;        /* k·ln2 */ \
	VSUBPD      r, v, r;                /* r = v - k·ln2 */ \
	VMULPD      r, r, r2;               /* r2 = r·r */ \
	VMULPD.BCST expC1<>(SB), r, e;      /* C1·r */ \
	VADDPD.BCST one<>(SB), e, e;        /* er = 1 + C1·r */ \
	VMULPD.BCST expC3<>(SB), r, t;      /* C3·r */ \
	VADDPD.BCST expC2<>(SB), t, t;      /* C2 + C3·r */ \
	VMULPD      t, r2, t;               /* r2·(…) */ \
	VADDPD      t, e, e;                /* er += r2·(…) */ \
	VMULPD.BCST expC5<>(SB), r, t;      /* C5·r */ \
	VADDPD.BCST expC4<>(SB), t, t;      /* C4 + C5·r */ \
	VMULPD.BCST expC6<>(SB), r2, r;     /* C6·r2 */ \
	VADDPD      r, t, t;                /* C4 + C5·r + C6·r2 */ \
	VMULPD      r2, r2, r2;             /* r2·r2 */ \
	VMULPD      t, r2, t;               /* r2·r2·(…) */ \
	VADDPD      t, e, e;                /* er += r2·r2·(…) */ \
	VPADDQ.BCST expBias<>(SB), k, k;    \
	VPSLLQ      $52, k, k;              /* 2^k */ \
	VMULPD      k, e, e /* er·2^k */

// func geluAVX512(y, cdf, x []float32)
//
// DI, SI and DX walk y, cdf and x; CX counts the blocks of eight. In lanes
// with |x·√½| ≥ 2, erfTail's result replaces the polynomial's; it is
// computed only for blocks with such a lane.
TEXT ·geluAVX512(SB), NOSPLIT, $0-72
	MOVQ         y_base+0(FP), DI
	MOVQ         y_len+8(FP), CX
	MOVQ         cdf_base+24(FP), SI
	MOVQ         x_base+48(FP), DX
	VBROADCASTSS sqrtHalf<>(SB), Y13
	VBROADCASTSS half32<>(SB), Y14
	VBROADCASTSS one32<>(SB), Y15
	VBROADCASTSD erfP0<>(SB), Z16
	VBROADCASTSD erfP2<>(SB), Z17
	VBROADCASTSD erfP4<>(SB), Z18
	VBROADCASTSD erfP6<>(SB), Z19
	VBROADCASTSD erfP8<>(SB), Z20
	VBROADCASTSD erfQ0<>(SB), Z21
	VBROADCASTSD erfQ2<>(SB), Z22
	VBROADCASTSD one<>(SB), Z23
	SHRQ         $3, CX
	JZ           done

loop:
	VMOVUPS   (DX), Y0      // x
	VMULPS    Y13, Y0, Y1   // x·√½
	VCVTPS2PD Y1, Z1        // v

	// erf32: v·P(s) with s = v·v.
	VMULPD      Z1, Z1, Z2             // s
	VMULPD      Z2, Z2, Z3             // s2
	VMULPD      Z3, Z3, Z4             // s4
	VMULPD.BCST erfP1<>(SB), Z2, Z5    // P1·s
	VSUBPD      Z5, Z16, Z5            // p = P0 - P1·s
	VMULPD.BCST erfP3<>(SB), Z2, Z6    // P3·s
	VSUBPD      Z6, Z17, Z6            // P2 - P3·s
	VMULPD      Z6, Z3, Z6             // s2·(…)
	VADDPD      Z6, Z5, Z5             // p += s2·(…)
	VMULPD.BCST erfP5<>(SB), Z2, Z6    // P5·s
	VSUBPD      Z6, Z18, Z6            // P4 - P5·s
	VMULPD.BCST erfP7<>(SB), Z2, Z7    // P7·s
	VSUBPD      Z7, Z19, Z7            // P6 - P7·s
	VMULPD      Z7, Z3, Z7             // s2·(P6 - P7·s)
	VADDPD      Z7, Z6, Z6             // P4 - P5·s + s2·(…)
	VMULPD      Z6, Z4, Z6             // s4·(…)
	VADDPD      Z6, Z5, Z5             // p += s4·(…)
	VMULPD      Z4, Z4, Z6             // s4·s4
	VMULPD.BCST erfP9<>(SB), Z2, Z7    // P9·s
	VSUBPD      Z7, Z20, Z7            // P8 - P9·s
	VMULPD.BCST erfP10<>(SB), Z3, Z8   // P10·s2
	VADDPD      Z8, Z7, Z7             // P8 - P9·s + P10·s2
	VMULPD      Z7, Z6, Z6             // s4·s4·(…)
	VADDPD      Z6, Z5, Z5             // p += s4·s4·(…)
	VMULPD      Z5, Z1, Z5             // v·p

	// erfTail where |v| ≥ 2 (predicate GE_OQ, false for NaN as Go's >=).
	VPANDQ.BCST  absMask<>(SB), Z1, Z9  // |v|
	VCMPPD.BCST  $0x1d, two<>(SB), Z9, K1
	KORTESTW     K1, K1
	JZ           round
	VMINPD.BCST  erfOne<>(SB), Z9, Z9   // min(|v|, erfOne)
	VSUBPD.BCST  three<>(SB), Z9, Z9    // t
	VMULPD       Z9, Z9, Z10            // t2
	VMULPD.BCST  erfQ1<>(SB), Z9, Z11   // Q1·t
	VSUBPD       Z11, Z21, Z11          // q = Q0 - Q1·t
	VMULPD.BCST  erfQ3<>(SB), Z9, Z12   // Q3·t
	VSUBPD       Z12, Z22, Z12          // Q2 - Q3·t
	VMULPD       Z12, Z10, Z12          // t2·(…)
	VADDPD       Z12, Z11, Z11          // q += t2·(…)
	VMULPD       Z10, Z10, Z12          // t2·t2
	VMULPD.BCST  erfQ4<>(SB), Z12, Z12  // t2·t2·Q4
	VADDPD       Z12, Z11, Z11          // q += t2·t2·Q4
	EXPKERNEL(Z11, Z12, Z6, Z7, Z8, Z9)
	VSUBPD       Z12, Z23, Z12          // 1 - e^q, positive
	VPANDQ.BCST  signMask<>(SB), Z1, Z9 // v's sign
	VPORQ        Z9, Z12, Z12           // math.Copysign(1 - e^q, v)
	VMOVAPD      Z12, K1, Z5

round:
	VCVTPD2PS Z5, Y5        // erf32(x·√½)
	VADDPS    Y5, Y15, Y6   // 1 + erf
	VMULPS    Y6, Y14, Y6   // c = 0.5·(1 + erf)
	VMULPS    Y6, Y0, Y7    // x·c
	VMOVUPS   Y6, (SI)
	VMOVUPS   Y7, (DI)
	ADDQ      $32, DX
	ADDQ      $32, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET

// func geluBackwardAVX512(dx, x, cdf, dy []float32)
//
// DI, SI, DX and R8 walk dx, x, cdf and dy; CX counts the blocks of eight.
// exp32's clamp is VMAXPD with the argument as its second operand, which
// VMAXPD returns when either is NaN: max(expMin, v) is then exp32's
// branch, -0 and NaN included.
TEXT ·geluBackwardAVX512(SB), NOSPLIT, $0-96
	MOVQ         dx_base+0(FP), DI
	MOVQ         dx_len+8(FP), CX
	MOVQ         x_base+24(FP), SI
	MOVQ         cdf_base+48(FP), DX
	MOVQ         dy_base+72(FP), R8
	VBROADCASTSS negHalf32<>(SB), Y13
	VBROADCASTSS invSqrt2Pi<>(SB), Y14
	VBROADCASTSD expMin<>(SB), Z16
	SHRQ         $3, CX
	JZ           done

loop:
	VMOVUPS   (SI), Y0        // x
	VMULPS    Y0, Y13, Y1     // -0.5·x
	VMULPS    Y0, Y1, Y1      // -0.5·x·x
	VCVTPS2PD Y1, Z1
	VMAXPD    Z1, Z16, Z1     // v = max(expMin, …)
	EXPKERNEL(Z1, Z2, Z3, Z4, Z5, Z6)
	VCVTPD2PS Z2, Y2          // exp32(-0.5·x·x)
	VMULPS    Y14, Y2, Y2     // pdf = exp32(…)·invSqrt2Pi
	VMULPS    Y2, Y0, Y2      // x·pdf
	VMOVUPS   (DX), Y3        // cdf
	VADDPS    Y2, Y3, Y2      // cdf + x·pdf
	VMOVUPS   (R8), Y3        // dy
	VMULPS    Y3, Y2, Y2      // (…)·dy
	VMOVUPS   Y2, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DX
	ADDQ      $32, R8
	ADDQ      $32, DI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET
