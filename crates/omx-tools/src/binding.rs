//! `omx_prepare_binding`'s choice of CPUs per endpoint: which interrupt serves each
//! endpoint of a board, from `/proc/interrupts`, as the original tool chose them.

/// The receive interrupts of interface `iface` in a `/proc/interrupts` text, as
/// (irq, queue number) in file order: lines whose last column names the interface,
/// except transmit queues (a name containing "tx", any case). The queue number is the
/// first number in the name once the interface's own name is taken out of it
/// (`eth0-rx-3` is queue 3 of eth0), 0 when there is none.
pub fn receive_irqs(interrupts: &str, iface: &str) -> Vec<(u32, u32)> {
    interrupts
        .lines()
        .filter_map(|l| {
            let (irq, rest) = l.trim_start().split_once(':')?;
            let irq: u32 = irq.trim().parse().ok()?;
            let name = rest.split_whitespace().last()?;
            if !name.contains(iface) || name.to_ascii_lowercase().contains("tx") {
                return None;
            }
            let masked = name.replacen(iface, "", 1);
            let digits: String = masked
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(char::is_ascii_digit)
                .collect();
            Some((irq, digits.parse().unwrap_or(0)))
        })
        .collect()
}

/// The interrupt of each endpoint index below `endpoints`: when the queues are
/// numbered 0..N-1, endpoint j takes queue j mod N; otherwise endpoint j takes the
/// j-th interrupt found (endpoints past the last have none).
pub fn endpoint_irqs(irqs: &[(u32, u32)], endpoints: u32) -> Vec<(u32, u32)> {
    let mut queues: Vec<u32> = irqs.iter().map(|&(_, q)| q).collect();
    queues.sort_unstable();
    let numbered = !irqs.is_empty() && queues.iter().copied().eq(0..irqs.len() as u32);
    (0..endpoints)
        .filter_map(|j| {
            let irq = if numbered {
                let q = j % irqs.len() as u32;
                irqs.iter().find(|&&(_, n)| n == q)?.0
            } else {
                irqs.get(j as usize)?.0
            };
            Some((j, irq))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS: &str = "           CPU0       CPU1
  24:          0          0   PCI-MSI 1048576-edge      eth0
  25:       1200          0   PCI-MSI 1048577-edge      eth0-rx-0
  26:          0       3400   PCI-MSI 1048578-edge      eth0-rx-1
  27:         10          0   PCI-MSI 1048579-edge      eth0-TX-0
  28:         99          0   PCI-MSI 1048580-edge      eth1-rx-0
 NMI:          0          0   Non-maskable interrupts
";

    #[test]
    fn receive_queues_of_one_interface_without_transmit_queues() {
        assert_eq!(
            receive_irqs(INTERRUPTS, "eth0"),
            vec![(24, 0), (25, 0), (26, 1)]
        );
        assert_eq!(receive_irqs(INTERRUPTS, "eth1"), vec![(28, 0)]);
        assert!(receive_irqs(INTERRUPTS, "veth7").is_empty());
    }

    #[test]
    fn numbered_queues_are_shared_round_robin_others_in_order() {
        // eth0 and eth0-rx-0 both count as queue 0: not 0..N-1, so in file order.
        let irqs = receive_irqs(INTERRUPTS, "eth0");
        assert_eq!(endpoint_irqs(&irqs, 4), vec![(0, 24), (1, 25), (2, 26)]);
        let numbered = [(40, 1), (41, 0)];
        assert_eq!(endpoint_irqs(&numbered, 3), vec![(0, 41), (1, 40), (2, 41)]);
        assert!(endpoint_irqs(&[], 4).is_empty());
    }
}
