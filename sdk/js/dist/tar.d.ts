/**
 * A small tar writer (POSIX ustar with pax headers for long names and link
 * targets), enough to send a build context: directories, regular files and
 * symbolic links (written as links, never followed), in lexical order,
 * without owner names or ids, so that the same tree gives the same tar.
 *
 * @module
 */
/** One entry to write. */
export interface TarEntry {
    /** The name in the archive, with slashes; directories end in "/". */
    name: string;
    type: "file" | "dir" | "symlink";
    /** Permission bits. */
    mode: number;
    /** Modification time in seconds. */
    mtime: number;
    data?: Uint8Array;
    linkname?: string;
}
/** Writes entries as one tar archive. */
export declare function tar(entries: TarEntry[]): Uint8Array;
/**
 * Collects the tree at path (a directory, a file or a link) as tar entries
 * named under prefix: a directory's contents go under "prefix/", a file or
 * link is "prefix" itself. Other kinds of file (sockets, devices, FIFOs) are
 * skipped.
 */
export declare function collect(path: string, prefix: string): Promise<TarEntry[]>;
