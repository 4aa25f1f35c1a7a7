//! Named event counters (frames sent/received per type, drops per reason). The names
//! follow the original driver's counter set where one exists.

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct Counters { $(pub $name: u64,)* }

        impl Counters {
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name),)*];

            /// Every counter with its name, in a stable order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name),)*].into_iter()
            }

            pub fn add(&mut self, other: &Counters) {
                $(self.$name += other.$name;)*
            }
        }
    };
}

counters! {
    send_tiny, send_small, send_medium_frag, send_rndv, send_notify,
    send_connect_request, send_connect_reply, send_liback, send_nack_lib, send_nack_mcp,
    send_pull_req, send_pull_reply,
    recv_tiny, recv_small, recv_medium_frag, recv_rndv, recv_notify,
    recv_connect_request, recv_connect_reply, recv_liback, recv_nack_lib, recv_nack_mcp,
    recv_pull_req, recv_pull_reply,
    resends, pull_rerequests, pull_timeout_abort, partner_resets, connect_bad_key,
    drop_bad_header_datalen, drop_bad_datalen, drop_bad_skblen, drop_bad_field,
    drop_unknown_type, drop_invalid_type, drop_bad_peer_addr, drop_bad_peer_index,
    drop_bad_endpoint, drop_bad_session, drop_not_connected, drop_bad_sesnum,
    drop_obsolete, drop_early_full, drop_unexp_full, drop_medium_inconsistent,
    drop_pull_bad_region, drop_pull_bad_offset_length,
    drop_pull_reply_bad_magic, drop_pull_reply_bad_handle, drop_pull_reply_bad_seqnum,
    drop_pull_reply_duplicate, drop_nack_mcp_bad_handle, drop_stale_notify,
    drop_bad_ack, drop_connect_reply_stale,
    send_bundle, recv_bundle, drop_bad_bundle,
    send_local_eager, send_local_rndv, send_local_notify, send_local_pull_req, send_local_push,
    recv_local_eager, recv_local_rndv, recv_local_pushed, local_copy_refused,
    drop_checksum, partner_evicted, drop_partner_full,
    fast_retransmits, rto_timeouts, recv_dup_ack, send_dup_ack,
    pull_fast_rerequests, pull_frames_rerequested, pull_block_timeouts, pull_window_cuts,
    send_stripe_pull, recv_stripe_reply, stripe_paths_closed, stripe_paths_probed, drop_bad_stripe,
}
