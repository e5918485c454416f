/*
 * Decimal integers written straight into an output buffer, for storage's compiled encoder (_wire.c): sprintf's
 * format parsing costs more than the digits on the hot path (a few lengths and numbers per message).
 * put_decimal writes no NUL; 20 digits and a sign always fit in 21 bytes.
 */
#ifndef STREAMGATE_DECIMAL_H
#define STREAMGATE_DECIMAL_H

static inline char *
put_decimal(char *out, long long value)
{
    char digits[20];
    char *end = digits + sizeof digits, *p = end;
    unsigned long long magnitude = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    do {
        *--p = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (value < 0)
        *out++ = '-';
    while (p < end)
        *out++ = *p++;
    return out;
}

#endif
