/* truncate.c - a message longer than the receive buffer (eager and
 * rendezvous sizes, and 1 B into 0 B) completes the receive with
 * MPI_ERR_TRUNCATE, writes nothing past the buffer (a guard area after it is
 * checked), and the pair keeps working afterwards. Partners (r, r^1); even
 * ranks send.
 *
 *   truncate     (even number of ranks >= 2)
 *
 * Note: Open MPI 4.1.4's ob1 PML fails the rendezvous case (it writes the
 * whole 100000 B message into a 50000 B buffer), so this program is not part
 * of the ob1 sanity runs.
 */
#include "common.h"

static int peer;
static int is_sender(void)
{
    return (g_rank & 1) == 0;
}

static void send_msg(size_t len, int tag, long seq)
{
    unsigned char *b = xmalloc(len);
    fill(b, len, g_rank, peer, tag, seq);
    MPI_OK(MPI_Send(b, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
    free(b);
}

static void recv_check(size_t len, int tag, long seq, const char *what)
{
    unsigned char *b = xmalloc(len);
    MPI_Status st;
    MPI_OK(MPI_Recv(b, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
    check_status(&st, peer, tag, (int)len, what);
    verify(b, len, peer, g_rank, tag, seq, what);
    free(b);
}

static void test_truncate(void)
{
    static const size_t lens[][2] = {{1000, 100}, {100000, 50000}, {1, 0}};
    test_begin("truncate");
    for (int k = 0; k < 3; k++) {
        size_t len = lens[k][0], room = lens[k][1];
        if (is_sender()) {
            send_msg(len, 800 + k, k);
        } else {
            /* the buffer is followed by a guard area that must stay intact */
            size_t guard = len + 4096;
            unsigned char *b = xmalloc(room + guard);
            memset(b, 0xEE, room + guard);
            MPI_Status st;
            int rc = MPI_Recv(b, (int)room, MPI_BYTE, peer, 800 + k, MPI_COMM_WORLD, &st);
            int cls = MPI_SUCCESS;
            MPI_Error_class(rc, &cls);
            CHECK(cls == MPI_ERR_TRUNCATE, "%zu B into %zu B: error class %d, expected MPI_ERR_TRUNCATE (%d)",
                  len, room, cls, MPI_ERR_TRUNCATE);
            size_t spill = 0, last = 0;
            for (size_t i = room; i < room + guard; i++)
                if (b[i] != 0xEE) {
                    spill++;
                    last = i;
                }
            CHECK(spill == 0, "%zu B into %zu B: %zu bytes written past the buffer (up to offset %zu)",
                  len, room, spill, last);
            free(b);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        /* the pair still works */
        if (is_sender())
            send_msg(4000, 810 + k, k);
        else
            recv_check(4000, 810 + k, k, "message after a truncated receive");
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    start(&argc, &argv);
    peer = g_rank ^ 1;
    if (peer >= g_size) {
        if (g_rank == 0)
            fprintf(stderr, "truncate: needs an even number of ranks\n");
        MPI_Finalize();
        return 2;
    }
    test_truncate();
    return finish("truncate");
}
