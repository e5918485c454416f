/*
 * Decimal integers written straight into an output buffer, for the compiled encoders of a package's
 * _speedups: sprintf's format parsing costs more than the digits on their hot paths. Every package keeps
 * this same file beside its own C (no include across packages); a test keeps the copies identical.
 * Writes no NUL; a sign and 20 digits always fit in 21 bytes.
 */
#ifndef STREAMGATE_DECIMAL_H
#define STREAMGATE_DECIMAL_H

static inline char *
put_decimal(char *out, long long value)
{
    unsigned long long rest = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    unsigned long long probe = rest;
    int width = 1;
    char *end;
    if (value < 0)
        *out++ = '-';
    for (; probe >= 10; probe /= 10)
        width++;
    end = out + width;
    for (char *p = end; p > out; rest /= 10)
        *--p = (char)('0' + rest % 10);
    return end;
}

#endif
